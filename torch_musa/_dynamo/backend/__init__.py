"""The real torch_musa's path of musa's dynamo backends (``musagraphs``)."""
