# The report: figures and tables that `snakemake --report report.html` gathers, with their
# captions in workflow/report/: compliance counts, tokens per phase and language, training
# curves per stage, the evaluation table and memorization curve, the QRPO reward, and each
# stage's manifest summary. Made from the other stages' files; nothing is recomputed.
# Included after the release: it reads its manifest and RELEASE_SINKS.
# Code: apertus/report/. Config: `report:` (config/README.md). Tests: tests/report/.

# Every training stage, in order: pretraining and long context, then SFT and QRPO.
REPORT_TRAINING = PRETRAIN_TRAINED + POSTTRAIN_STAGES
# Stages with a manifest page, in pipeline order.
REPORT_STAGES = (
    ([] if POSTTRAIN_ONLY else ["data", "tokenize", "pretrain"])
    + ["export", "evaluate"]
    + (["posttrain"] if POSTTRAIN_STAGES else [])
    + (["release"] if RELEASE["enabled"] else [])
    + ["report"]
)
REPORT_PHASES = [phase["name"] for phase in config["tokenize"]["phases"]]
# The data and tokenization pages, of a run with those stages (not a post-training-only one).
REPORT_DATA = not POSTTRAIN_ONLY
REPORT_SUMMARY = stage_path("report", "summary")


rule report_training:
    input:
        run=lambda wildcards: evaluate_run_dir(wildcards.stage),
    output:
        plot=report_file(
            stage_path("report", "training", "{stage}.png"),
            "training",
            "3. Training",
            stage="{stage}",
            what="loss, LR, grad norm, masked fraction",
        ),
        manifest=stage_path("report", "training", "{stage}.manifest.json"),
    log:
        log_path("report", "training-{stage}"),
    benchmark:
        benchmark_path("report", "training-{stage}")
    wildcard_constraints:
        stage="|".join(REPORT_TRAINING),
    # Not a cluster job: one plot of a training run's metrics.
    localrule: True
    threads: 1
    resources:
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.report.steps"),
        config=stage_config("report"),
    shell:
        "python -m apertus.report.steps training --config {params.config:q}"
        " --manifest {output.manifest} --name {wildcards.stage}"
        " --metrics {input.run}/metrics.jsonl --output {output.plot} > {log} 2>&1"


rule report_summary:
    input:
        # Everything the run made: the summary runs last and lists every step's manifest.
        sinks=RELEASE_SINKS
        + ([rules.release.output.manifest] if RELEASE["enabled"] else []),
        training=expand(rules.report_training.output.manifest, stage=REPORT_TRAINING),
        # The data and tokenization pages' inputs (REPORT_DATA).
        funnel=[rules.data_funnel.output.json] if REPORT_DATA else [],
        filtered=(
            expand(
                rules.data_filter.output.manifest,
                zip,
                source=[os.path.basename(os.path.dirname(d)) for d in DATA_FILTERED],
                shard=[os.path.basename(d) for d in DATA_FILTERED],
            )
            if REPORT_DATA
            else []
        ),
        corpus=[rules.data_select.output.manifest] if REPORT_DATA else [],
        removed=(
            [
                *expand(
                    rules.data_filter.output.removed,
                    zip,
                    source=[
                        os.path.basename(os.path.dirname(d)) for d in DATA_FILTERED
                    ],
                    shard=[os.path.basename(d) for d in DATA_FILTERED],
                ),
                rules.data_dedup.output.removed,
                rules.data_select.output.removed,
            ]
            if REPORT_DATA
            else []
        ),
        phases=(
            expand(rules.tokenize_phase.output.out, phase=REPORT_PHASES)
            if REPORT_DATA
            else []
        ),
        table=rules.evaluate_table.output.out,
        memorization=(
            expand(rules.evaluate_memorization.output.out, stage=EVALUATE_CHECKPOINTS)
            if EVALUATE_MEMORIZATION
            else []
        ),
        rewards=[rules.posttrain_report.output.json] if POSTTRAIN_STAGES else [],
    output:
        data=(
            [
                report_file(
                    os.path.join(REPORT_SUMMARY, "compliance.html"),
                    "compliance",
                    "1. Data",
                    what="robots.txt, PII, skipped records, removed samples",
                ),
                report_file(
                    os.path.join(REPORT_SUMMARY, "tokens.png"),
                    "tokens",
                    "2. Tokenization",
                    what="tokens per phase (figure)",
                ),
                report_file(
                    os.path.join(REPORT_SUMMARY, "tokens.html"),
                    "tokens",
                    "2. Tokenization",
                    what="tokens per phase (tables)",
                ),
            ]
            if REPORT_DATA
            else []
        ),
        cost=report_file(
            os.path.join(REPORT_SUMMARY, "cost.html"),
            "cost",
            "3. Training",
            stage="all",
            what="what this run costs: memory, time, GPU-hours per GPU job",
        ),
        evaluation=report_file(
            os.path.join(REPORT_SUMMARY, "evaluation.html"),
            "evaluation",
            "4. Evaluation",
            what="scores across checkpoints",
        ),
        memorization=(
            [
                report_file(
                    os.path.join(REPORT_SUMMARY, "memorization.png"),
                    "memorization",
                    "4. Evaluation",
                    what="memorization curve",
                )
            ]
            if EVALUATE_MEMORIZATION
            else []
        ),
        rewards=(
            [
                report_file(
                    os.path.join(REPORT_SUMMARY, "rewards.png"),
                    "rewards",
                    "5. Post-training",
                    what="reward (figure)",
                ),
                report_file(
                    os.path.join(REPORT_SUMMARY, "rewards.html"),
                    "rewards",
                    "5. Post-training",
                    what="reward (tables)",
                ),
            ]
            if POSTTRAIN_STAGES
            else []
        ),
        manifests=[
            report_file(
                os.path.join(REPORT_SUMMARY, "manifests", f"{stage}.html"),
                "manifests",
                "6. Manifests",
                stage=stage,
            )
            for stage in REPORT_STAGES
        ],
        manifest=f"{REPORT_SUMMARY}.manifest.json",
    log:
        log_path("report", "summary"),
    benchmark:
        benchmark_path("report", "summary")
    # Not a cluster job: gathers the other stages' files, computes nothing.
    localrule: True
    threads: 1
    resources:
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.report.steps"),
        config=stage_config("report"),
        run_dir=RUN_DIR,
        output_dir=lambda wildcards, output: os.path.dirname(output.cost),
        data=lambda wildcards, input: " ".join(
            [f"--funnel {path}" for path in input.funnel]
            + [f"--corpus-manifest {path}" for path in input.corpus]
            + [
                f"--filter-manifest {path.split(os.sep)[-2]}={path}"
                for path in input.filtered
            ]
            + [f"--removed {path}" for path in input.removed]
        ),
        phases=lambda wildcards, input: " ".join(
            f"--phase {name}={path}" for name, path in zip(REPORT_PHASES, input.phases)
        ),
        memorization=lambda wildcards, input: " ".join(
            f"--memorization {name}={path}"
            for name, path in zip(EVALUATE_CHECKPOINTS, input.memorization)
        ),
        rewards=lambda wildcards, input: (
            f"--rewards {input.rewards[0]}" if input.rewards else ""
        ),
        stages=" ".join(f"--stage {stage}" for stage in REPORT_STAGES),
        # `apertus plan` on the whole config for the cost page: any config change re-runs
        # this one cheap local step, as the run's other outputs would anyway.
        run_config=lambda wildcards: canonical_json(config),
    shell:
        "python -m apertus.report.steps summary --config {params.config:q}"
        " --manifest {output.manifest} --run-dir {params.run_dir}"
        " --output-dir {params.output_dir} {params.data} {params.phases}"
        " --scores {input.table}/scores.csv {params.memorization} {params.rewards}"
        " {params.stages} --run-config {params.run_config:q} > {log} 2>&1"


TARGETS.append(rules.report_summary.output.manifest)
