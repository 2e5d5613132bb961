"""The report as one self-contained HTML page: styles inline, figures as base64
PNGs, no scripts or links to fetch, so it renders offline."""
from __future__ import annotations

import base64
import html

from torch_musa.utils.doctor import charts
from torch_musa.utils.doctor.sections import sections

_STYLE = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 8px;text-align:left;overflow-wrap:break-word}
th{background:#f3f3f3}code{font-size:12px}.bad{color:#b00}.ok{color:#070}img{max-width:100%}"""


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def page(report: dict) -> str:
    e = html.escape
    body = [f"<h1>musa-doctor: {e(report['script'].rsplit('/', 1)[-1])} on {e(report['card_name'])}</h1>"]
    parts = sections(report)
    for s in parts[-1:] + parts[:-1]:            # the verdict first: it is what the page is for
        body.append(f"<h2>{e(s.title)}</h2>")
        if s.title == "Verdict":
            body += [f'<p class="{"ok" if v["ok"] else "bad"}">{e(v["line"])}</p>'
                     for v in report["verdicts"].values()]
            continue
        body += [f"<p>{e(n)}</p>" for n in s.notes]
        if s.rows:
            body.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in s.headers) + "</tr>")
            body += ["<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in s.rows]
            body.append("</table>")
        if s.title == "Memory":
            body.append(_img(charts.memory_over_run(report), "device memory over the run"))
        if s.title == "Time":
            body.append(_img(charts.time_per_op(report), "estimated time per op"))
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>musa-doctor report</title>"
            f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
