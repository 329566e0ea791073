# The Apertus pipeline: raw web text -> filtered data -> tokens -> pretraining -> long context
# -> post-training -> evaluation -> release. Each stage lives in workflow/rules/<stage>.smk and
# appends its final outputs to TARGETS.


include: "workflow/rules/common.smk"


# Stage rule files are included here, in pipeline order, once they do real work.


check_stage_contract()


report: "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        TARGETS,
