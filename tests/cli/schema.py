"""The JSON report's schema (docs/report.schema.json), for the tests: every
report a test reads is checked against it (conftest.load)."""
import functools
import json
import os

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

SCHEMA_PATH = os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "..", "docs", "report.schema.json"))


@functools.lru_cache(maxsize=None)
def schema():
    """The schema, read once."""
    with open(SCHEMA_PATH) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def validator():
    return Draft202012Validator(schema())


def validate_report(report):
    """Raises AssertionError naming where a report breaks the schema and how
    (the most relevant error when there are several)."""
    error = best_match(validator().iter_errors(report))
    if error is not None:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}"
                        for p in error.absolute_path)
        raise AssertionError(f"report{where}: {error.message} "
                             f"(schema: {'/'.join(map(str, error.absolute_schema_path))})")


def load_report(path):
    """A report from its file, checked against the schema on the way."""
    with open(path) as f:
        report = json.load(f)
    validate_report(report)
    return report
