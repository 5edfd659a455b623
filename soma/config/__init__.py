"""What a run is, pure and torch-free: the floor the Snakefile imports at parse time.

A run's description and its pure check (`spec`: `RunSpec`), the one reader of options typed
as text (`options`), the workflow's config as typed (`configs`), what makes a run the run it
is (`identity`), who takes part in a round and how many must come (`participation`), a
study's grid (`study`), and each client's secrets folder (`secrets`). Nothing here imports
torch (a test keeps it so); driving a run is soma.run's, on top of this.
"""
