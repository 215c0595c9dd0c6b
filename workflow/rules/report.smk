rule report:
    input:
        expand("results/{run}/checkpoint.json", run=RUNS),
    output:
        csv="results/report/efficiency.csv",
        md="results/report/efficiency.md",
    params:
        runs=RUNS,
    log:
        "logs/report.log",
    localrule: True
    conda:
        "../../envs/aire.yaml"
    shell:
        "python -m airetrain report --results results --out results/report {params.runs:q} > {log:q} 2>&1"
