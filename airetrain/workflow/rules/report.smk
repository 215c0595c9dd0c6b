rule report:
    input:
        expand("results/{run}/checkpoint.json", run=RUNS),
        expand("results/{tune}/tune.csv", tune=TUNES),
    output:
        csv=report("results/report/efficiency.csv", caption="../report/table.rst", category="Efficiency"),
        md="results/report/efficiency.md",
        html=report("results/report/efficiency.html", caption="../report/table.rst", category="Efficiency"),
        efficiency=report(
            "results/report/efficiency.png", caption="../report/efficiency.rst", category="Efficiency"
        ),
        throughput=report(
            "results/report/throughput.png", caption="../report/throughput.rst", category="Efficiency"
        ),
        loss=report("results/report/loss.png", caption="../report/loss.rst", category="Training"),
        results="results/report/results.md",
        results_csv="results/report/results.csv",
        results_html="results/report/results.html",
    params:
        cmd=lambda w, output: command(
            "report",
            *RUNS,
            *TUNES,
            "--energy-json",
            json.dumps(to_dict(PLANS.settings.site.energy), sort_keys=True),
            python=PYTHON,
            results="results",
            out=os.path.dirname(output.csv),
        ),
    log:
        "logs/report.log",
    localrule: True
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} > {log:q} 2>&1"
