"""Sub-commands of the classifier: `classify`, `train-classifier`, `eval-classifier`.

Only argument parsing and I/O live here; heavy imports (numpy, scikit-learn) happen inside the
handlers so that `slorouter --help` stays fast. Input parsing for `classify` is in `jsonl`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from router.cli_types import seed_number


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register `classify`, `train-classifier` and `eval-classifier`."""
    p = subparsers.add_parser(
        "classify",
        help="label JSON-lines requests with task, risk, probabilities and signals",
        description="Reads one JSON object per line ({'text': ...} or {'messages': [...], "
        "'tools': [...], 'response_format': {...}, 'hints': {'task', 'risk'}}) and writes one "
        "JSON line per input. A tool is a wire tool object or a plain name ('get_weather': a "
        "function tool of that name). A FILE ending in .gz is read gzipped. Malformed lines "
        "(hints.task and metadata.task naming different tasks included) are reported on stderr "
        "with their line number and make the exit code 1.",
    )
    p.add_argument("file", nargs="?", type=Path, help="input file (default: stdin)")
    p.add_argument("--model", type=Path, help="a model.zip other than the shipped one")
    p.set_defaults(func=run_classify)

    t = subparsers.add_parser(
        "train-classifier", help="train the task/risk classifier and write its artifact"
    )
    t.add_argument(
        "--data",
        type=Path,
        action="append",
        required=True,
        help="JSONL(.gz) training file; repeat to combine files",
    )
    t.add_argument("--out", type=Path, required=True, help="directory for model.zip + metadata")
    t.add_argument(
        "--eval",
        type=Path,
        action="append",
        default=[],
        help="held-out JSONL(.gz) file(s) scored into the metadata",
    )
    t.add_argument("--estimator", choices=("logreg", "svm", "nb"), default="svm")
    t.add_argument("--c", type=float, default=0.5, help="inverse regularisation strength")
    t.add_argument("--min-df", type=int, default=10, help="rows a feature must occur in")
    t.add_argument(
        "--char-ngrams", action="store_true", help="add character 2-4-grams of the message start"
    )
    t.add_argument("--no-augment", action="store_true", help="train on the rows as they are")
    t.add_argument("--seed", type=seed_number, default=13)
    t.add_argument(
        "--head-chars",
        type=int,
        help="characters of a long last user message the model reads from its start "
        "(default: router/classify/features.py FeatureConfig)",
    )
    t.add_argument(
        "--tail-chars",
        type=int,
        help="... and from its end",
    )
    t.set_defaults(func=run_train)

    e = subparsers.add_parser(
        "eval-classifier", help="score a classifier on labelled JSONL(.gz) and print a report"
    )
    e.add_argument("--data", type=Path, action="append", required=True)
    e.add_argument("--model", type=Path, help="a model.zip other than the shipped one")
    e.add_argument("--title", default="Test split")
    e.add_argument(
        "--structure",
        action="store_true",
        help="also score the rows with a system prompt, history and tools added",
    )
    e.set_defaults(func=run_eval)


def run_classify(args: argparse.Namespace) -> int:
    from router.classify.jsonl import classify_stream

    classifier = _classifier(args.model)
    # Lines are read as bytes: one that is not UTF-8 is a malformed line like any other.
    if args.file is None:
        return classify_stream(sys.stdin.buffer, sys.stdout, sys.stderr, classifier)
    from router.classify.data import DataError, open_lines

    try:
        return classify_stream(open_lines(args.file), sys.stdout, sys.stderr, classifier)
    except OSError as exc:
        print(f"slorouter classify: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    except DataError as exc:  # a cut .gz file
        print(f"slorouter classify: {exc}", file=sys.stderr)
        return 2


def _classifier(model: Path | None) -> Any:
    """The shipped classifier, or the one at `model`; one line and exit 2 when unreadable."""
    from router.classify.classifier import load_classifier, load_default_classifier
    from router.errors import ConfigError

    try:
        return load_default_classifier() if model is None else load_classifier(model)
    except ConfigError as exc:
        print(f"slorouter: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def run_train(args: argparse.Namespace) -> int:
    from router.classify.artifact import train_and_write
    from router.classify.data import DataError
    from router.classify.training import TrainingDataError

    try:
        path = train_and_write(
            data=args.data,
            out=args.out,
            evals=args.eval,
            estimator=args.estimator,
            char_ngrams=args.char_ngrams,
            augment=not args.no_augment,
            seed=args.seed,
            c=args.c,
            min_df=args.min_df,
            head_chars=args.head_chars,
            tail_chars=args.tail_chars,
        )
    except (DataError, TrainingDataError, OSError) as exc:
        print(f"slorouter train-classifier: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} and {path.parent / 'metadata.json'}")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from router.classify.artifact import read_some
    from router.classify.augment import augment_for_eval
    from router.classify.data import DataError
    from router.classify.evaluation import evaluate
    from router.classify.report import markdown

    try:
        examples = read_some(args.data)
    except (DataError, OSError) as exc:
        print(f"slorouter eval-classifier: {exc}", file=sys.stderr)
        return 2
    classifier = _classifier(args.model)
    print(markdown(evaluate(classifier, examples), args.title))
    if args.structure:
        report = evaluate(classifier, augment_for_eval(examples, seed=7))
        print(markdown(report, args.title + ", with system prompt, history and tools added"))
    return 0
