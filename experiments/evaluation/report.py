"""The run report: our cold-start and warm numbers beside the STATIC and TIGER papers'."""

import json
from pathlib import Path

from data import atomic
from data.errors import ArtifactError
from experiments import config as config_lib
from experiments.config import Config, paper_dataset
from experiments.evaluation import plots
from experiments.pipeline import artifacts
from experiments.pipeline.layout import RunLayout

# STATIC ("Vectorizing the Trie") Table 3: cold-start Recall@1 as fractions; 1B model, beam 20.
PAPER_COLD_START = {
    "beauty": {
        0.02: {"unconstrained": 0.0, "random": 0.0042, "static": 0.0429},
        0.05: {"unconstrained": 0.0, "random": 0.0017, "static": 0.0160},
    },
    "sports": {
        0.02: {"unconstrained": 0.0, "random": 0.0027, "static": 0.0124},
        0.05: {"unconstrained": 0.0, "random": 0.0011, "static": 0.0117},
    },
    "toys": {
        0.02: {"unconstrained": 0.0, "random": 0.0042, "static": 0.0439},
        0.05: {"unconstrained": 0.0, "random": 0.0017, "static": 0.0225},
    },
}
# TIGER, leave-one-out: Recall@5, NDCG@5, Recall@10, NDCG@10.
PAPER_WARM = {
    "beauty": {"recall@5": 0.0454, "ndcg@5": 0.0321, "recall@10": 0.0648, "ndcg@10": 0.0384},
    "sports": {"recall@5": 0.0264, "ndcg@5": 0.0181, "recall@10": 0.0400, "ndcg@10": 0.0225},
    "toys": {"recall@5": 0.0521, "ndcg@5": 0.0371, "recall@10": 0.0712, "ndcg@10": 0.0432},
}
METHODS = ("unconstrained", "random", "static")
# Reported beside `static` when the evaluation scored beams other than by joint log-probability.
PLAIN = "static_plain"


# STATIC with the content prior in its beam scores (eval.cold_content_weight).
CONTENT_PRIOR = "static_content"
# The retrievers' leave-one-out beams with the co-occurrence prior (eval.warm_cooc_weight).
COOCCURRENCE_PRIOR = "static_cooccurrence"
# STATIC's beams and the content neighbour's ranking fused (eval.cold_hybrid_weight).
HYBRID = "hybrid"
# The parallel-codes retriever over the cold set, and its fusion with the content neighbour
# (eval.cold_parallel).
PARALLEL = "parallel"
PARALLEL_CONTENT = "parallel_content"
# Reported where every result has it: the content nearest neighbour (no model), plain STATIC,
# STATIC with the content prior, the hybrid, the parallel-codes retriever and its fusion.
OPTIONAL = ("content", PLAIN, CONTENT_PRIOR, HYBRID, PARALLEL, PARALLEL_CONTENT)


def _methods(results: list[dict]) -> tuple[str, ...]:
    return METHODS + tuple(m for m in OPTIONAL if all(m in r["methods"] for r in results))


def scoring_note(results: list[dict]) -> str:
    """A line naming the cold-start beam scores, or "" for the plain joint log-probability."""
    notes = []
    for r in sorted(results, key=lambda r: r["cold_start_fraction"]):
        s = r.get("scoring") or {}
        parts = []
        if PLAIN in r["methods"] and "prior_weight" in s:
            parts.append(
                f"prior weight {s['prior_weight']:g}, "
                f"level weights {', '.join(f'{w:g}' for w in s['level_weights'])}"
            )
        if CONTENT_PRIOR in r["methods"] and "content_weight" in s:
            parts.append(
                f"content prior weight {s['content_weight']:g} at temperature "
                f"{s['content_temperature']:g}" + (", exact" if s.get("content_exact") else "")
            )
        if HYBRID in r["methods"] and "hybrid_weight" in s:
            parts.append(
                f"hybrid content weight {s['hybrid_weight']:g} at rank offset "
                f"{s['hybrid_offset']:g}"
            )
        if parts:
            notes.append(f"{r['cold_start_fraction']:g}: {', '.join(parts)}")
    tfidf = any(r.get("content_vectors") == "tfidf" for r in results)
    parallel = any(PARALLEL in r["methods"] for r in results)
    profiles = {
        (r["content_profile"]["recent"], r["content_profile"]["decay"])
        for r in results
        if "content_profile" in r
    }
    if not notes and not tfidf and not parallel and not profiles:
        return ""
    text = (
        "Beam scores of `unconstrained` and `static` (eval.cold_prior_weight, "
        f"eval.cold_level_weights): {'; '.join(notes)}."
        if notes
        else ""
    )
    if any(PLAIN in r["methods"] for r in results):
        text += f" `{PLAIN}` is STATIC ranked by the joint log-probability, as in the paper."
    if any(CONTENT_PRIOR in r["methods"] for r in results):
        text += (
            f" `{CONTENT_PRIOR}` is `static` plus the content neighbour's softmax over the cold "
            "items, entered level by level (eval.cold_content_weight, "
            "eval.cold_content_temperature); exact: with one beam per cold item "
            "(eval.cold_content_exact)."
        )
    if any(HYBRID in r["methods"] for r in results):
        text += (
            f" `{HYBRID}` fuses `static`'s beams and the content neighbour's ranking by weighted "
            "reciprocal rank (eval.cold_hybrid_weight, eval.cold_hybrid_offset), as LIGER fuses "
            "dense and generative retrieval."
        )
    if parallel:
        text += (
            f" `{PARALLEL}` is the parallel-codes retriever (RPG; the `parallel` section) trained "
            "on the split's training histories, ranking the whole cold set by each item's "
            "text codes (eval.cold_parallel)"
            + (
                f"; `{PARALLEL_CONTENT}` fuses its ranking with the content neighbour's as "
                f"`{HYBRID}` does."
                if any(PARALLEL_CONTENT in r["methods"] for r in results)
                else "."
            )
        )
    for recent, decay in sorted(profiles):
        text += (
            f" The content neighbour's query weights the user's last {recent} items by "
            f"{decay:g}**j, j places from the end (eval.cold_content_recent, "
            "eval.cold_content_decay)."
        )
    if tfidf:
        text += (
            " The content neighbour (`content`, and the prior of `static_content`) ranks by "
            "cosine between TF-IDF rows, not the tokenizer's embeddings "
            "(eval.cold_content_vectors)."
        )
    return text.strip() + "\n"


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.2f}"


def cold_start_table(results: list[dict], *, with_paper: bool = True) -> str:
    """Markdown: one row per (fraction, method); the paper's Recall@1 beside test results on the
    paper's datasets."""
    lines = [
        "| cold start | method | Recall@1 % | paper Recall@1 % | Recall@5 % | Recall@10 % "
        "| NDCG@10 % | valid % | cold % | latency ms/user (median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for res in sorted(results, key=lambda r: r["cold_start_fraction"]):
        p = res["cold_start_fraction"]
        # The paper's numbers are test numbers: none beside a validation result.
        test_split = res.get("split", "test") == "test" and with_paper
        paper = PAPER_COLD_START.get(res["dataset"], {}).get(p, {}) if test_split else {}
        for method in _methods([res]):
            m = res["methods"][method]
            r1 = _pct(m["recall@1"])
            if "expected_recall@1" in m:  # the seeded sample beside its closed form
                r1 += f" (expected {_pct(m['expected_recall@1'])})"
            lines.append(
                f"| {p:g} ({res['num_cold_items']} items, {res['num_test_users']} users) "
                f"| {method} "
                f"| {r1} | {_pct(paper.get(method))} | {_pct(m['recall@5'])} "
                f"| {_pct(m['recall@10'])} | {_pct(m['ndcg@10'])} | {_pct(m.get('valid_rate'))} "
                f"| {_pct(m.get('cold_rate'))} | {m.get('latency_ms_median', float('nan')):.2f} |"
            )
    return "\n".join(lines)


def baselines_table(result: dict) -> str:
    """Markdown: the model-free cold-start methods of `genret eval-baselines`."""
    lines = [
        f"{result['split']} split, cold start {result['cold_start_fraction']:g} "
        f"({result['num_cold_items']} items, {result['num_test_users']} users)\n",
        "| method | Recall@1 % | Recall@5 % | Recall@10 % | NDCG@10 % |",
        "|---|---|---|---|---|",
    ]
    for name, m in result["methods"].items():
        keys = ("recall@1", "recall@5", "recall@10", "ndcg@10")
        lines.append(f"| {name} | " + " | ".join(_pct(m[k]) for k in keys) + " |")
    return "\n".join(lines)


def warm_table(result: dict) -> str:
    paper = PAPER_WARM.get(result["dataset"], {})
    keys = ("recall@5", "ndcg@5", "recall@10", "ndcg@10")
    lines = ["| method | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for method, m in result["methods"].items():
        lines.append(f"| {method} | " + " | ".join(f"{m[k]:.4f}" for k in keys) + " |")
    if paper:
        lines.append("| TIGER (paper) | " + " | ".join(f"{paper[k]:.4f}" for k in keys) + " |")
    if excluded := result.get("history_excluded"):
        lines += [
            "\nThe same ranked lists without each user's own history items (never a target: the "
            "data keep one interaction per user and item; S3-Rec's full-sort protocol, whose "
            "SASRec numbers TIGER's Table 1 quotes, ranks this way; TIGER's own rule is not "
            "stated):\n",
            lines[0],
            lines[1],
        ]
        for method, m in excluded.items():
            lines.append(f"| {method} | " + " | ".join(f"{m[k]:.4f}" for k in keys) + " |")
    if members := result.get("ensemble"):
        how = (
            "beams scored by the log of the members' mean joint probability"
            if result.get("ensemble_rule") == "mixture"
            else "per-level log-probabilities averaged"
        )
        lines.append(
            f"\nAn ensemble of {len(members)} retrievers ({how}): "
            + ", ".join(f"`{m}`" for m in members)
            + "."
        )
    if s := result.get("scoring"):
        lines.append(
            f"\nBeam scores of `unconstrained` and `static_all_items`: the joint log-probability "
            f"minus {s['prior_weight']:g} x the training log prior of the first "
            f"{s['prior_levels']} codes (eval.warm_prior_weight, eval.warm_prior_levels). "
            f"`{PLAIN}` ranks by the joint log-probability alone, as TIGER does."
        )
    if c := result.get("cooccurrence_prior"):
        lines.append(
            f"\n`{COOCCURRENCE_PRIOR}` is `static_all_items` plus {c['weight']:g} x the log of "
            "the co-occurrence prior p(item | last item), counted on the training histories with "
            f"{c['smoothing']:g} popularity pseudo-counts and entered level by level "
            "(eval.warm_cooc_weight, eval.warm_cooc_smoothing): a hybrid of the retriever and "
            "`item_cooccurrence`, not the retriever alone."
        )
    return "\n".join(lines)


def plot_cold_start(results: list[dict], out_dir: Path) -> list[Path]:
    """Recall@1 by method and latency by method, one group per cold-start fraction."""
    results = sorted(results, key=lambda r: r["cold_start_fraction"])
    written = []
    for metric, label, fname in (
        ("recall@1", "Recall@1 (%)", "recall_at_1.png"),
        ("latency_ms_median", "decoding latency per user (ms, median)", "latency.png"),
    ):
        path = plots.cold_start_bars(results, _methods(results), metric, label, out_dir / fname)
        written += [path] if path else []
    return written


def _environment_lines(results: dict[str, dict]) -> list[str]:
    """One line per distinct environment the results were computed in (data.environment),
    naming the results of each when there is more than one; results from before environments
    were recorded are left out."""
    groups: dict[str, tuple[dict, list[str]]] = {}
    for name, r in results.items():
        env = r.get("environment")
        if isinstance(env, dict):
            groups.setdefault(json.dumps(env, sort_keys=True), (env, []))[1].append(name)
    lines = []
    for env, names in groups.values():
        pkgs = ", ".join(f"{k} {v}" for k, v in env.get("packages", {}).items() if v)
        where = f" ({', '.join(names)})" if len(groups) > 1 else ""
        simd = env.get("cpu_vector_extensions")
        simd = f" ({simd})" if simd else ""
        lines.append(
            f"- Environment{where}: {pkgs}; Python {env.get('python')}; {env.get('cpu')}{simd} "
            f"x {env.get('cpu_count')}."
        )
    return lines


def _checkpoint_lines(results: dict[str, dict]) -> list[str]:
    """One line per retriever checkpoint the results evaluated (artifacts.evaluated_checkpoint),
    naming the results of each, and the run's best step where it was another."""
    groups: dict[tuple, list[str]] = {}
    for name, r in results.items():
        if "evaluated_step" in r:
            rdir = Path(r.get("retriever") or "retriever").name
            key = (rdir, r["evaluated_step"], r.get("best_step"), bool(r.get("fallback")))
            groups.setdefault(key, []).append(name)
    lines = []
    for (rdir, step, best, fallback), names in groups.items():
        how = ", its best" if best == step else ""
        if fallback:
            how = f", not its best: step {best} does not restore (damaged or missing)"
        lines.append(f"- Evaluated `{rdir}` at step {step}{how} ({', '.join(names)}).")
    return lines


def _run_section(cfg: Config, layout: RunLayout, results: dict[str, dict]) -> list[str]:
    """Which preset, dataset, config and environment made these numbers."""
    data = cfg.data
    dataset = data.dataset + (f" (category {data.category})" if data.category else "")
    paper = paper_dataset(data)
    return [
        "## Run\n",
        f"- Preset: `{cfg.name}`; dataset: {dataset}; seed {cfg.seed}.",
        f"- Resolved config: `{layout.config.name}` in the work directory, and below.",
        "- Papers' numbers are shown "
        + (
            f"beside ours ({paper} is one of their datasets)."
            if paper
            else "nowhere: the papers did not measure this dataset."
        ),
        *_environment_lines(results),
        *_checkpoint_lines(results),
        "",
        "<details><summary>config</summary>\n",
        "```json",
        json.dumps(config_lib.to_dict(cfg), indent=1),
        "```",
        "</details>\n",
    ]


def _read_result(path: Path, command: str) -> dict:
    """A results file, or an ArtifactError naming it and the command that writes it again."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(
            f"{path}: cannot be read ({type(e).__name__}: {e}); run `{command}` to write it again"
        ) from None
    if not isinstance(result, dict):
        raise ArtifactError(f"{path}: expected a JSON object; run `{command}` to write it again")
    return result


def write_report(cfg: Config, layout: RunLayout) -> list[Path]:
    """Collects the results files into results/report.md (+ PNGs); returns the paths written."""
    results_dir = layout.results
    paper = paper_dataset(cfg.data)
    cold_paths = sorted(results_dir.glob("cold_start_*.json"))
    commands = {p: f"genret eval-cold-start --cold-start {p.stem[11:]}" for p in cold_paths}
    commands[layout.warm_result] = "genret eval-warm"
    cold = [_read_result(p, commands[p]) for p in cold_paths]
    for path in [*cold_paths, layout.warm_result]:
        if path.exists():
            artifacts.check_result_current(layout, path, _read_result(path, commands[path]))
    results = {p.name: r for p, r in zip(cold_paths, cold, strict=True)}
    # The papers' numbers only beside the datasets they were measured on.
    for r in cold:
        r["dataset"] = paper or cfg.data.dataset
    parts = [f"# Results: {cfg.data.dataset}\n"]
    written = []
    if cold:
        parts += [
            "## Cold-start retrieval (STATIC section 6)\n",
            "Recall@1 of unconstrained beam search, constrained random guessing and "
            "STATIC-constrained beam search over the cold-start items"
            + (
                "; the paper's Recall@1 beside ours (their model: 1B parameters, beam 20).\n"
                if paper
                else ".\n"
            ),
            scoring_note(cold),
            cold_start_table(cold, with_paper=paper is not None),
            "",
        ]
        for png in plot_cold_start(cold, results_dir):
            parts.append(f"![{png.stem}]({png.name})")
            written.append(png)
        parts.append("")
    # The generative retriever's leave-one-out results, then the item-position models ranked
    # over the full catalog on the same split (SASRec, parallel codes) as rows of the same table.
    warm = None
    if layout.warm_result.exists():
        warm = _read_result(layout.warm_result, "genret eval-warm")
        results[layout.warm_result.name] = warm
    for path, command in (
        (layout.sasrec_result, "genret sasrec"),
        (layout.parallel_result, "genret parallel"),
    ):
        if not path.exists():
            continue
        other = _read_result(path, command)
        results[path.name] = other
        if warm is None:
            warm = {"methods": {}, "history_excluded": {}}
        warm["methods"].update(other["methods"])
        if "history_excluded" in warm and "history_excluded" in other:
            warm["history_excluded"].update(other["history_excluded"])
    if warm is not None:
        warm["dataset"] = paper or cfg.data.dataset
        parts += ["## Leave-one-out (TIGER benchmark)\n", warm_table(warm), ""]
    parts += _run_section(cfg, layout, results)
    atomic.write_text(layout.report, "\n".join(parts) + "\n")
    return [layout.report, *written]
