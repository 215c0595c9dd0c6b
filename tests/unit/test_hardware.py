"""hardware.py: the one table of hardware facts, and the config defaults that rest on it."""
from airetrain.cluster.hardware import AIRE_GPU_NODE, GPUS, gpu_facts
from airetrain.plan.config import defaults_from_schema, load_schema


def test_the_schemas_site_defaults_are_the_aire_gpu_node():
    site = defaults_from_schema(load_schema())["site"]
    assert {k: site[k] for k in ("gpus_per_node", "cores_per_node", "mem_gb_per_node", "max_wall_hours")} == \
        {k: v for k, v in AIRE_GPU_NODE.items() if k != "gpu"}


def test_the_default_memory_budget_is_the_site_gpus_with_headroom_and_none_for_an_unknown_gpu(tmp_path):
    from airetrain.plan.planner import plan_all

    def budget(site: dict):
        return plan_all({"roots": {"scratch": str(tmp_path)}, "site": site, "runs": {"r": {}}},
                        env={"HOME": "/nonexistent"})["r"].config.memory_budget_gb

    assert budget({}) == 40 and 40 < GPUS[AIRE_GPU_NODE["gpu"]]["memory_gb"]   # the L40S's 48 GB x 5/6
    assert isinstance(budget({}), int)   # as the config's 40 was: a run's checkpoint fingerprint stays the same
    assert budget({"gpu_type": "NVIDIA H200"}) == 117.5 and budget({"gpu_type": "mi300x"}) is None


def test_device_names_find_their_facts():
    assert gpu_facts("NVIDIA L40S")["bf16_tflops"] == 362.05
    assert gpu_facts("NVIDIA H200")["memory_gb"] == 141
    assert gpu_facts("Some Other GPU") is None


def test_native_bf16_is_told_from_the_cpus_flags():
    from airetrain.cluster.hardware import cpu_bf16_native

    assert cpu_bf16_native("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n") is False   # AVX2 only: emulated
    assert cpu_bf16_native("flags\t\t: avx2 avx512f avx512_bf16 amx_tile\n") is True
    assert cpu_bf16_native("Processor\t: ARMv8\n") is None   # no x86 flags line: not known


# what CUDA's torch.cuda.get_device_name reports for each type, and the type the table gives it
CUDA_NAMES = {"NVIDIA L40S": "L40S", "NVIDIA L40": "L40", "NVIDIA A40": "A40",
              "NVIDIA A100-SXM4-40GB": "A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB": "A100-PCIE-40GB",
              "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB", "NVIDIA A100 80GB PCIe": "A100-PCIE-80GB",
              "NVIDIA H100 PCIe": "H100-PCIE", "NVIDIA H100 80GB HBM3": "H100-SXM", "NVIDIA H200": "H200",
              "NVIDIA GH200 480GB": "GH200", "Tesla V100-SXM2-32GB": "V100-SXM2-32GB",
              "Tesla V100-SXM2-16GB": "V100-SXM2-16GB", "Tesla V100-PCIE-32GB": "V100-PCIE-32GB",
              "Tesla V100-PCIE-16GB": "V100-PCIE-16GB", "NVIDIA RTX 6000 Ada Generation": "RTX-6000-ADA"}


def test_every_type_is_found_by_its_cuda_name_with_every_figure_and_its_datasheet():
    from airetrain.cluster.hardware import FIELDS

    assert {gpu_facts(name)["type"] for name in CUDA_NAMES} == set(GPUS)
    for name, kind in CUDA_NAMES.items():
        facts = gpu_facts(name)
        assert facts["type"] == kind and set(FIELDS) <= set(facts), name
        assert facts["memory_gb"] > 0 and facts["tdp_w"] > 0 and facts["datasheet"].startswith("NVIDIA")
        # a dense peak, never sparsity's doubled one: fp8 is twice bf16 where the type has fp8
        assert facts["fp8_tflops"] is None or abs(facts["fp8_tflops"] / facts["bf16_tflops"] - 2) < 0.03, name
    assert gpu_facts("NVIDIA A40")["fp8_tflops"] is None and gpu_facts("Tesla V100-SXM2-32GB")["bf16_tflops"] is None


def test_a_gres_type_that_fits_several_types_gives_only_the_figures_they_share():
    a100, h100 = gpu_facts("a100"), gpu_facts("h100")
    assert (a100["bf16_tflops"], a100["memory_gb"], a100["tdp_w"]) == (312.0, None, None)   # 40 or 80 GB
    assert (h100["memory_gb"], h100["bf16_tflops"]) == (80, None)   # PCIe's peak or SXM's
    assert gpu_facts("l40s")["type"] == "L40S" and gpu_facts("a100_80g")["memory_gb"] == 80


def test_no_module_but_the_table_names_a_gpu():
    """Every GPU figure comes from hardware.py: no other module of the package has a GPU type's name in its
    code (docstrings and comments aside), as the advice once had the L40S's 48 GB."""
    import ast
    import re

    from conftest import REPO

    kinds = sorted({re.escape(k.split("-")[0]) for k in GPUS}, key=len, reverse=True)
    names = re.compile(r"\b(" + "|".join(kinds) + r")", re.IGNORECASE)
    found = []
    for path in sorted((REPO / "airetrain").rglob("*.py")):
        if path.name == "hardware.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                text = node.value
            elif isinstance(node, ast.Name):
                text = node.id
            else:
                continue
            if names.search(text):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text[:60]!r}")
    assert found == []


def test_a_nodes_gpu_gres_and_a_sites_disagreements_are_read():
    from airetrain.cluster.site_facts import disagreements, gpu_gres

    assert gpu_gres("gpu:l40s:3(S:0-1)") == (3, "l40s") and gpu_gres("gpu:4,shard:8") == (4, None)
    assert gpu_gres("(null)") == (0, None) and gpu_gres("shard:8,gpu:a100:2(S:0)") == (2, "a100")
    assert disagreements({"gpus_per_node": 3, "gpu_type": "L40S", "mem_gb_per_node": 250},
                         {"gpus_per_node": 3, "gpu_type": "l40s", "mem_gb_per_node": 251.0}) == []   # within 2 %
    assert disagreements({"gpus_per_node": 4}, {"gpus_per_node": 3}) == ["site.gpus_per_node = 4, SLURM says 3"]
