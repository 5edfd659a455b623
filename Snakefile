# soma's workflow is workflow/Snakefile (the Snakemake workflow catalogue's layout); this file
# includes it, so that `snakemake` in the checkout, and `snakemake -s /path/to/soma/Snakefile`
# from anywhere else, run it.


include: "workflow/Snakefile"


# Its rule `all` is the default target here too: Snakemake keeps an included file's
# `default_target:` to that file.
workflow.default_target = "all"
