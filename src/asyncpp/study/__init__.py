"""Studies: a declared study file (cells, seeds, lr rule, endpoints) run resumably and
reported with paired statistics (``asyncpp-study``); ``ladder`` holds the project's own tiers.
"""
