# The Apertus pipeline: raw web text -> filtered data -> tokens -> pretraining -> long context
# -> post-training -> evaluation -> release. Each stage lives in workflow/rules/<stage>.smk and
# appends its final outputs to TARGETS.


include: "workflow/rules/common.smk"
# Stage rule files, in pipeline order; a stage is included once it does real work.
include: "workflow/rules/data.smk"
include: "workflow/rules/tokenize.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/posttrain.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/release.smk"
include: "workflow/rules/report.smk"


check_stage_contract()


report: "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        TARGETS,
