"""The run layer: what a federated run is (`spec`), how a value typed as text reads
(`options`), one client's part in a round (`step`), and the round loop (`drive`), shared by
`soma client`, the workflow's jobs and `soma simulate`; and a baseline's training (`alone`).

Importing this package (and `options`, `spec`) needs neither torch nor PyYAML: the
Snakefile imports them at parse time.
"""
