# The Apertus pipeline: raw web text -> filtered data -> tokens -> pretraining -> long context
# -> post-training -> evaluation -> release. Each stage lives in workflow/rules/<stage>.smk and
# appends its final outputs to TARGETS. Stages are included here only once they do real work.


include: "workflow/rules/common.smk"


report: "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        TARGETS,
