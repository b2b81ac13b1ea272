"""krig's workflows: the commands (run, check, validate, bisect, qualify, bundle, reproduce,
compare, export, lab, cli) on top of the parts (rigs, kernels, analysis) and the vocabulary
(krig)."""
