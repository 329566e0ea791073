# The pretraining stage (RECIPE.md §1-§4, §6): the tokenization phases in order, each
# continuing the previous one, then the long-context stages; torchtitan under torchrun.
# Code: apertus/model/, apertus/train/. Config: `pretrain:` (config/README.md). Tests: tests/train/.

from apertus.train.config import PretrainConfig
from apertus.train.plan import CONTROL_SUFFIX, pretrain_stages

PRETRAIN = config["pretrain"]
# Which stage follows which, and each stage's nodes: apertus.train.plan, shared with the
# stage code.
PRETRAIN_PLAN = {
    stage.name: stage for stage in pretrain_stages(PretrainConfig.from_dict(PRETRAIN))
}
# Every stage trained, in plan order; the line (each stage continuing the one before, the last
# one post-trained and released) leaves out the Goldfish control. None in a post-training-only
# run (`POSTTRAIN_ONLY`).
PRETRAIN_TRAINED = [] if POSTTRAIN_ONLY else list(PRETRAIN_PLAN)
PRETRAIN_STAGES = [
    name for name in PRETRAIN_TRAINED if PRETRAIN_PLAN[name].kind != "control"
]
# The Goldfish control, if any: {control stage: the phase it repeats without Goldfish}.
PRETRAIN_CONTROLS = {
    name: name.removesuffix(CONTROL_SUFFIX)
    for name, stage in PRETRAIN_PLAN.items()
    if stage.kind == "control"
}
# A phase depends on every key but the long-context stages and the control; the control on
# its phase's keys and its own; the long-context stages on all of them.
PRETRAIN_PHASE_KEYS = [
    key for key in PRETRAIN if key not in ("long_context", "goldfish_control")
]


rule pretrain_stage:
    input:
        phases=expand(
            stage_path("tokenize", "phases", "{phase}"),
            phase=[phase["name"] for phase in config["tokenize"]["phases"]],
        ),
        previous=lambda wildcards: (
            [stage_path("pretrain", PRETRAIN_PLAN[wildcards.stage].previous)]
            if PRETRAIN_PLAN[wildcards.stage].previous
            else []
        ),
    output:
        out=directory(stage_path("pretrain", "{stage}")),
        manifest=stage_path("pretrain", "{stage}.manifest.json"),
    log:
        log_path("pretrain", "{stage}"),
    benchmark:
        benchmark_path("pretrain", "{stage}")
    wildcard_constraints:
        stage="|".join(PRETRAIN_TRAINED),
    # Training is the run's critical path: ahead of evaluations when both are ready.
    priority: 10
    threads: pretrain_threads
    resources:
        **{
            key: lambda wildcards, key=key: stage_job_resources(
                "pretrain", PRETRAIN_PLAN[wildcards.stage].nnodes
            )[key]
            for key in stage_job_resources("pretrain")
        },
    params:
        code=step_code("apertus.train.stage"),
        config=lambda wildcards: pretrain_config(wildcards.stage),
        phases_root=lambda wildcards, input: os.path.dirname(input.phases[0]),
        previous=lambda wildcards, input: (
            f"--previous {input.previous[0]}" if input.previous else ""
        ),
        work_root=lambda wildcards, output: os.path.join(
            os.path.dirname(output.out), "_work"
        ),
    shell:
        "python -m apertus.train.stage --config {params.config:q} --manifest {output.manifest}"
        " --name {wildcards.stage} --phases-root {params.phases_root} {params.previous}"
        " --output {output.out} --work-root {params.work_root} > {log} 2>&1"


TARGETS.extend(expand(rules.pretrain_stage.output.manifest, stage=PRETRAIN_TRAINED))
