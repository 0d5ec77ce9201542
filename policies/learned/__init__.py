"""Learned per-request routing: predict each candidate's probability of success from the prompt.

`features` turns (prompt, task) into a sparse vector, `predictor` holds one linear model per
candidate and fits/loads them, `decide` picks the cheapest candidate whose predicted quality clears
a calibrated threshold, `artifact` saves and loads a versioned trained router. Imports only
scikit-learn, numpy, scipy and the standard library (never `router` or `evals`).

Import the modules themselves: this package imports nothing, so that a router using only the
decision rule (`decide`, numpy) does not load scikit-learn at start-up.
"""
