"""The claims notebooks 03 and 04 judge, each on its pre-stated primary endpoint (paper
Section 5.1, Table 3 for time-concat; Sections 3-4 for the bottleneck): which variants and tasks
an endpoint reads, the conditions each claim sets against the baseline and the controls, and the
claim in words (kit.stats.outcomes judges them)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from kit.experiments.timecat import cells, paper
from kit.experiments.timecat.settings import TimecatSettings
from kit.experiments.timecat.variants import VARIANT_KINDS, kinds_where
from kit.stats import outcomes, rounds
from kit.train.settings import RunSettings


def controls_of(results: pl.DataFrame) -> pl.DataFrame:
    """The control variants of `results` (kinds with `controls`), one row each."""
    return (
        results.lazy()  # one query: every summary asks, twice
        .select("variant", "kind", "n")
        .unique(maintain_order=True)
        .filter(pl.col("kind").is_in(kinds_where(lambda kind: kind.controls)))
        .collect()
    )


def claimed_variant(results: pl.DataFrame) -> str | None:
    """The time-concat variant the claim is about: the concatenated kind's variant of largest
    n > 1 (the first listed among equals); None when the run has none."""
    several = (
        results.lazy()  # one query: every summary asks, twice
        .select("variant", "kind", "n")
        .unique(maintain_order=True)
        .filter(
            pl.col("kind").is_in(kinds_where(lambda kind: kind.concatenated)) & (pl.col("n") > 1)
        )
        .collect()
    )
    if not several.height:
        return None
    most = several["n"].max()
    return next(variant for variant, _, n in several.rows() if n == most)


def endpoint(
    results: pl.DataFrame, rule: str, variant: str, against: str, tasks: list[str]
) -> list[float]:
    """The primary endpoint's paired values: per replicate (in order), `variant`'s top-1 minus
    `against`'s averaged over `tasks` (points); a replicate missing either on any task is left
    out."""
    # each side's rows in one query (a summary reads every condition's); the pairing and the
    # per-replicate means stay eager steps of their own: the values' last bits depend on the
    # row order each leaves, which one query joining or sorting after them changes
    chosen = results.lazy().filter((pl.col("rule") == rule) & pl.col("task").is_in(tasks))
    mine, theirs = pl.collect_all(
        [
            chosen.filter(pl.col("variant") == variant).select("replicate", "task", "top1"),
            chosen.filter(pl.col("variant") == against).select(
                "replicate", "task", pl.col("top1").alias("reference")
            ),
        ]
    )
    per = (
        mine.join(theirs, on=["replicate", "task"])
        .group_by("replicate")
        .agg(
            (100 * (pl.col("top1") - pl.col("reference"))).mean().alias("value"),
            pl.len().alias("tasks"),
        )
        .lazy()
        .filter(pl.col("tasks") == len(tasks))
        .sort("replicate")
        .collect()
    )
    return per["value"].to_list()


def resolution(results: pl.DataFrame, tasks: Sequence[str]) -> float:
    """The most one evaluation row moves an endpoint averaged over `tasks` (points): one row of
    the smallest evaluation split among them, over the number of tasks (kit.stats.outcomes
    takes no spread below it); 0 for results that do not record their evaluation rows."""
    if "eval_rows" not in results.columns or not tasks:
        return 0.0
    rows = results.filter(pl.col("task").is_in(list(tasks)))["eval_rows"].min()
    return 0.0 if not isinstance(rows, int) or rows <= 0 else 100 / rows / len(tasks)


def compute(results: pl.DataFrame, variant: str) -> float:
    """A variant's training compute in single-model iterations at width 1: n x width^2 x
    iterations per model (a ResNet's multiply-adds grow with the square of its width); 0 for
    untrained networks."""
    row = results.filter(pl.col("variant") == variant).row(0, named=True)
    return row["n"] * row["width"] ** 2 * (row["iterations_per_model"] or 0)


def _tasks(results: pl.DataFrame, variants: list[str], roles: list[str]) -> list[str]:
    """Tasks of `roles` every one of `variants` was probed on, in the results' order."""
    pairs = (  # each (task, variant) probed, once, in order of first appearance
        results.lazy()
        .filter(pl.col("role").is_in(roles))
        .select("task", "variant")
        .unique(maintain_order=True)
        .collect()
        .rows()
    )
    probed = set(pairs)
    return [
        t for t in dict.fromkeys(t for t, _ in pairs) if all((t, v) in probed for v in variants)
    ]


def condition(
    results: pl.DataFrame,
    rule: str,
    name: str,
    variant: str,
    against: str,
    roles: list[str],
    margin: float = 0.0,
    must_be: str = "better",
    flagged: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
) -> outcomes.Condition:
    """One condition of a claim: the endpoint of `variant` against `against` on every task of
    `roles` both were probed on (fixed by the design, never by the data). A condition that
    reads a `flagged` cell (kit.experiments.timecat.cells) says on which side: its judgement
    stands only where the flag's bias cannot have made it (kit.stats.outcomes.supports)."""
    tasks = _tasks(results, [variant, against], roles)
    values = endpoint(results, rule, variant, against, tasks) if tasks else []
    read = cells.read_flagged(flagged, (variant, against), tasks)
    sides = {"variant" if v == variant else "against" for v, _ in read}
    return outcomes.Condition(
        name,
        variant,
        against,
        tuple(tasks),
        outcomes.estimate(values, resolution=resolution(results, tasks)),
        margin,
        must_be,
        None if tasks else "no task shared",
        flagged=None if not sides else sides.pop() if len(sides) == 1 else "both",
        flagged_cells=", ".join(f"{v} on {t}" for v, t in read) or None,
    )


TIME_CONCAT, BOTTLENECK = "time-concat", "bottleneck"
#: the roles of the tasks the primary endpoints average over: every task but the pretraining
#: data itself
TRANSFER_ROLES = ["in-mixture", "unseen"]


def time_concat_conditions(
    results: pl.DataFrame,
    rule: str,
    baseline: str,
    smallest: float,
    flagged: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
) -> list[outcomes.Condition]:
    """Section 5.1's claim (Table 3): catN (`claimed_variant`) transfers better than the
    baseline at the same budget, beyond the controls. Primary endpoint: catN minus the
    baseline on the mean top-1 over the transfer tasks, paired by replicate. Controls, on the
    same endpoint: catN must beat every control whose training compute is at most its own (the
    width-matched model at equal compute, the untrained networks of the same n) and must not
    lose by `smallest` points to one given more compute (a wide model trained for the whole
    budget spends width^2 times cat1's). A control kind the run lacks is a missing condition:
    a gain means little without it. A condition reading a `flagged` probe cell keeps only the
    judgement its flag cannot have made (`condition`).
    Empty when the run has no catN of n > 1."""
    variant = claimed_variant(results)
    if variant is None:
        return []
    found = [
        condition(
            results,
            rule,
            f"{variant} vs {baseline}",
            variant,
            baseline,
            TRANSFER_ROLES,
            flagged=flagged,
        )
    ]
    mine = compute(results, variant)
    controls = controls_of(results)
    for row in controls.iter_rows(named=True):
        if (
            VARIANT_KINDS.get(row["kind"]).controls == "same_n"
            and row["n"] != results.filter(pl.col("variant") == variant)["n"][0]
        ):
            continue
        more = compute(results, row["variant"]) > 1.05 * mine
        found.append(
            condition(
                results,
                rule,
                f"{variant} vs {row['variant']}",
                variant,
                row["variant"],
                TRANSFER_ROLES,
                margin=-smallest if more else 0.0,
                must_be="not worse" if more else "better",
                flagged=flagged,
            )
        )
    present = set(controls["kind"])
    for kind in kinds_where(lambda kind: kind.controls):
        if kind not in present:
            found.append(
                outcomes.Condition(
                    f"{variant} vs {kind}",
                    variant,
                    kind,
                    (),
                    outcomes.estimate([]),
                    missing=f"no {kind} control in this run",
                )
            )
    return found


def time_concat_claim(
    results: pl.DataFrame,
    rule: str,
    baseline: str,
    smallest: float,
    flagged: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
) -> outcomes.Outcome:
    """Section 5.1's claim judged on `time_concat_conditions`."""
    found = time_concat_conditions(results, rule, baseline, smallest, flagged)
    if not found:
        return outcomes.Outcome(
            TIME_CONCAT,
            outcomes.INCONCLUSIVE,
            smallest,
            [],
            ["no time-concat variant of n > 1 in this run"],
        )
    return outcomes.outcome(TIME_CONCAT, found, smallest)


def bottleneck_conditions(
    results: pl.DataFrame,
    rule: str,
    baseline: str,
    smallest: float,
    flagged: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
) -> list[outcomes.Condition]:
    """Sections 3-4's claim: a model trained directly on a task beats a linear probe of the
    baseline on it, even where the pretraining mixture contains the task (the cpu profile's
    shape and texture). Primary endpoint: the direct variant minus the baseline on the mean
    top-1 over the tasks it trains on, paired by replicate. Empty when the run trains no
    direct variant."""
    direct = [
        row["variant"]
        for row in results.select("variant", "kind")
        .unique(maintain_order=True)
        .iter_rows(named=True)
        if VARIANT_KINDS.get(row["kind"]).per_task
    ]
    return [
        condition(results, rule, f"{d} vs {baseline}", d, baseline, TRANSFER_ROLES, flagged=flagged)
        for d in direct
    ]


def bottleneck_claim(
    results: pl.DataFrame,
    rule: str,
    baseline: str,
    smallest: float,
    flagged: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
) -> outcomes.Outcome | None:
    """Sections 3-4's claim judged on `bottleneck_conditions`; None without a direct variant."""
    found = bottleneck_conditions(results, rule, baseline, smallest, flagged)
    return outcomes.outcome(BOTTLENECK, found, smallest) if found else None


#: every claim by name: its conditions, and whether it is stated without any (the time-concat
#: claim is, inconclusive; the bottleneck only where the run trains a direct variant)
CLAIMS = {TIME_CONCAT: (time_concat_conditions, True), BOTTLENECK: (bottleneck_conditions, False)}


def judge_round(
    results: pl.DataFrame,
    params: TimecatSettings,
    counts: Sequence[int],
    halt: str | None,
    names: Sequence[str] = tuple(CLAIMS),
) -> list[rounds.Round]:
    """Every claim of `names` the run states, judged after the looks at `counts` replicates
    on `results` (kit.stats.rounds: repeated intervals, and whether its cell stops; `halt`,
    why no further round starts)."""
    found = []
    for name in names:
        conditions_of, stated = CLAIMS[name]
        marked = cells.flagged(
            cells.probe_cells(results, params.probe_rule, params.max_probe_optimism)
        )
        conditions = conditions_of(
            results, params.probe_rule, params.baseline, params.smallest_effect, marked
        )
        if not (conditions or stated):
            continue
        found.append(
            rounds.judge_round(
                name, conditions, params.smallest_effect, params.design, counts, halt
            )
        )
    return found


TITLES = {
    TIME_CONCAT: "time-concat transfers better than {baseline} at the same budget, "
    "beyond the controls (paper Section 5.1, Table 3)",
    BOTTLENECK: "training directly on a task beats a linear probe of {baseline} on it "
    "(paper Sections 3-4)",
}


def outcome_line(found: outcomes.Outcome, baseline: str) -> str:
    """A claim in one line: its outcome, then each condition with its paired values, interval,
    judgement and the effect the run could have detected (or why it was not judged: a control
    not run, a flagged probe cell read)."""
    head = (
        f"Claim: {TITLES[found.claim].format(baseline=baseline)}: {found.status.upper()}{found.how}"
    )
    parts = [outcomes.condition_words(row) for row in found.rows]
    parts += [r for r in found.reasons if not found.rows]
    basis = paper.smallest_effect_basis(found.smallest)
    return f"{head} (smallest effect of interest {found.smallest:g} points{basis}) — " + "; ".join(
        parts
    )


def claims_markdown(summary: dict) -> str:
    """The claims of a summary as Markdown: per claim its outcome and title, one bullet per
    condition, then the what-ran line (notebook 03 shows it; the terminal prints the lines)."""
    parts = []
    for claim in summary["claims"]:
        bullets = "\n".join(f"- {text}" for text in claim["conditions"] or claim["reasons"])
        parts.append(
            f"**{claim['status'].upper()}**{claim.get('how', '')}: {claim['title']} (smallest "
            f"effect of interest {claim['smallest_effect']:g} points"
            f"{paper.smallest_effect_basis(claim['smallest_effect'])})\n\n{bullets}"
        )
    return "\n\n".join(parts + [f"*{summary['ran']}*"] if summary["ran"] else parts)


def model_words(train: RunSettings) -> str:
    """A pretraining run's model in words: architecture, width and image size."""
    return f"{train.model} at width {train.width:g}, {train.data.image_size} px"


def design_words(params: TimecatSettings) -> str:
    """The replicates' design in words: "9 replicates", or the rounds with their most, spending
    and wall budget (none, `wall_s` 0: this run makes the first round only, a later run the
    next ones; kit.stats.settings)."""
    rounds = params.rounds
    if rounds is None:
        return f"{params.replicates} replicates"
    wall = (
        "no wall budget: this run makes the first round only"
        if rounds.wall_s == 0
        else f"wall budget {rounds.wall_s:g} s"
    )
    return (
        f"replicates in rounds ({rounds.first}, then {rounds.add} per round to every cell not "
        f"yet decided, at most {rounds.most}; {rounds.spending} spending; {wall})"
    )


def what_ran(params: TimecatSettings, wall_s: float, machine: str) -> str:
    """One line saying what the verdicts rest on: data, model and width, image size, budget,
    replicates, probe, machine and wall time so far."""
    train = params.train
    if train is not None and train.data.synthetic is not None:
        data = f"the kit's synthetic world (seed {train.data.synthetic.seed})"
    elif train is not None:
        data = f"{train.data.kind} data"
    else:
        data = "released checkpoints"
    model = model_words(train) if train is not None else "the checkpoints' models"
    budget = (
        f"budget {params.total_iterations} iterations"
        if params.total_iterations
        else "no pretraining"
    )
    return (
        f"What ran: profile {params.profile}; {data}; {model}; {budget}; "
        f"{design_words(params)}; {params.probe_kind} probe, rule "
        f"{params.probe_rule}; {machine}; {wall_s / 60:.1f} min of wall time"
    )
