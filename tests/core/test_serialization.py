"""torch.load onto musa: a tensor rebuilt over a storage restored on musa is checked as on
the CPU (issue 35, item 11: a crafted file whose tensor claims more elements than its storage
holds grew the musa storage with zeros and loaded; the CPU refuses it)."""
import io
import zipfile

import pytest
import torch

import torch_musa  # noqa: F401


def _crafted(claimed: int = 1_000_000) -> bytes:
    """A saved float32 tensor of 4 elements (16 bytes) whose pickle claims ``claimed`` elements."""
    buf = io.BytesIO()
    torch.save(torch.zeros(4), buf)
    src, out = zipfile.ZipFile(io.BytesIO(buf.getvalue())), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                # size (4,): BININT1 4, TUPLE1 -> (claimed,): BININT claimed, TUPLE1
                assert data.count(b"K\x04\x85") == 1
                data = data.replace(b"K\x04\x85", b"J" + claimed.to_bytes(4, "little") + b"\x85")
            dst.writestr(info, data)
    return out.getvalue()


@pytest.mark.parametrize("map_location", ["cpu", "musa", "musa:0", torch.device("musa"), {"cpu": "musa"}])
@pytest.mark.parametrize("weights_only", [True, False])
def test_a_tensor_larger_than_its_storage_is_refused(map_location, weights_only):
    data = _crafted()
    with pytest.raises(RuntimeError, match="Trying to resize storage that is not resizable"):
        torch.load(io.BytesIO(data), weights_only=weights_only, map_location=map_location)


@pytest.mark.parametrize("new_zipfile", [True, False])
def test_saved_musa_tensors_load_as_before(new_zipfile):
    base = torch.arange(12.0, device="musa")
    x = base.view(3, 4)[1:, 1:3]  # a view at an offset, sharing its storage with y
    y = base[2:6]
    buf = io.BytesIO()
    torch.save({"x": x, "y": y, "h": x.half()}, buf, _use_new_zipfile_serialization=new_zipfile)
    buf.seek(0)
    got = torch.load(buf, weights_only=True)
    assert got["x"].device.type == "musa" and got["x"].storage_offset() == 5
    torch.testing.assert_close(got["x"].cpu(), x.cpu())
    torch.testing.assert_close(got["h"].cpu(), x.half().cpu())
    got["y"].add_(100)  # still one storage, as saved
    assert got["x"][0, 0].item() == 105.0
    assert not got["x"].untyped_storage().resizable()  # as a storage loaded for the CPU
    buf.seek(0)
    on_cpu = torch.load(buf, weights_only=True, map_location="cpu")
    assert on_cpu["x"].device.type == "cpu" and torch.equal(on_cpu["x"], x.cpu())
