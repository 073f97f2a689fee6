"""The HTML page: its assembly, its typed sections and blocks, its template. It imports the layers below
(core to results).
"""
