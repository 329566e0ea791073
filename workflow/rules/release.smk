# Release (RECIPE.md §9): the base model (last pretraining stage) and the aligned model (QRPO)
# in Hugging Face format with the evaluation table, the memorization curve, the reward report,
# the data funnel, model cards, SHA256SUMS and RELEASE-MANIFEST.json in one folder; then, when
# `release.hub.repo_id` is set, each model pushed to its own Hub repository in one tagged commit.
# Included LAST by the Snakefile: it reads TARGETS, every other stage's final outputs.
# Code: apertus/release/. Config: `release:` (config/README.md). Tests: tests/release/.

RELEASE = config["release"]
# Every other stage's sinks: any change upstream re-runs the release (taken before the
# release adds its own).
RELEASE_SINKS = list(TARGETS)
# The base model: the last pretraining stage; none in a post-training-only run.
RELEASE_BASE = PRETRAIN_STAGES[-1] if PRETRAIN_STAGES else None
RELEASE_ALIGNED = "qrpo" if "qrpo" in POSTTRAIN_STAGES else None
RELEASE_FOLDER = stage_path("release")


rule release:
    input:
        sinks=RELEASE_SINKS,
        base=[stage_path("export", RELEASE_BASE)] if RELEASE_BASE else [],
        aligned=[stage_path("export", RELEASE_ALIGNED)] if RELEASE_ALIGNED else [],
        table=rules.evaluate_table.output.out,
        memorization=(
            [stage_path("evaluate", "memorization", RELEASE_BASE)]
            if EVALUATE_MEMORIZATION
            else []
        ),
        memorization_control=(
            [
                stage_path("evaluate", "memorization", name)
                for name in PRETRAIN_CONTROLS
            ]
            if EVALUATE_MEMORIZATION
            else []
        ),
        funnel=(
            []
            if POSTTRAIN_ONLY
            else [rules.data_funnel.output.json, rules.data_funnel.output.plot]
        ),
        reward=(
            [
                rules.posttrain_report.output.json,
                rules.posttrain_report.output.markdown,
            ]
            if RELEASE_ALIGNED
            else []
        ),
    output:
        out=directory(RELEASE_FOLDER),
        manifest=str(RUN_DIR / "release.manifest.json"),
    log:
        log_path("release", "folder"),
    benchmark:
        benchmark_path("release", "folder")
    # Not a cluster job: copies the exports and reports into one folder.
    localrule: True
    threads: 1
    resources:
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.release.stage"),
        config=stage_config("release"),
        # The whole resolved config, recorded in RELEASE-MANIFEST.json.
        run_config=lambda wildcards: canonical_json(config),
        # The run's step manifests are collected into RELEASE-MANIFEST.json.
        run_dir=lambda wildcards, output: os.path.dirname(output.out),
        optional=lambda wildcards, input: " ".join(
            ([f"--base {input.base[0]}={RELEASE_BASE}"] if input.base else [])
            + (
                [f"--funnel-json {input.funnel[0]} --funnel-png {input.funnel[1]}"]
                if input.funnel
                else []
            )
            + (
                [f"--aligned {input.aligned[0]}={RELEASE_ALIGNED}"]
                if input.aligned
                else []
            )
            + (
                [f"--memorization {input.memorization[0]}"]
                if input.memorization
                else []
            )
            + (
                [f"--memorization-control {input.memorization_control[0]}"]
                if input.memorization_control
                else []
            )
            + (
                [f"--reward-json {input.reward[0]} --reward-md {input.reward[1]}"]
                if input.reward
                else []
            )
        ),
    shell:
        "python -m apertus.release.stage --config {params.config:q}"
        " --run-config {params.run_config:q} --manifest {output.manifest}"
        " --run-dir {params.run_dir} --table {input.table} {params.optional}"
        " --output {output.out}"
        " --sinks {input.sinks} > {log} 2>&1"


rule release_upload:
    input:
        folder=rules.release.output.out,
        manifest=rules.release.output.manifest,
    output:
        receipt=str(RUN_DIR / "release-upload.json"),
        manifest=str(RUN_DIR / "release-upload.manifest.json"),
    log:
        log_path("release", "upload"),
    benchmark:
        benchmark_path("release", "upload")
    # Not a cluster job: uploads to the Hugging Face Hub, nodes may lack network.
    localrule: True
    threads: 1
    resources:
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.release.hub"),
        config=stage_subconfig("release", "hub"),
    shell:
        "python -m apertus.release.hub upload --config {params.config:q}"
        " --folder {input.folder} --receipt {output.receipt} --manifest {output.manifest}"
        " > {log} 2>&1"


if RELEASE["enabled"]:

    TARGETS.append(rules.release.output.manifest)
    if RELEASE["hub"]["repo_id"]:

        TARGETS.append(rules.release_upload.output.receipt)
