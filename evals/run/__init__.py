"""`slorouter eval run`: send a suite of graded prompts to live deployments, write an eval report.

`suite` (the file format), `graders` and `judge` (pure grading), `calls` (one call through the
project's own providers), `runner` (items x models under bounded concurrency), `aggregate` (the
`EvalReport` with Wilson intervals), `cli` (the sub-command), `build_suites` (the shipped suites
from the in-repo datasets). The router never imports this package: it reads the reports.
"""
