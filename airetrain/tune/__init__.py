"""A hyperparameter search's study, on the submitting side: Optuna decides, airetrain's runs train.

    study      the Optuna study (journal file, pickled sampler state) under one process's lock
    steps      a slot's steps: tell a rung's evaluations, then train the trial further or ask for a new one
    table      tune.csv/md/html, a row per trial, and the best trial's weights
"""
