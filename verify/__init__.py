"""Property-based verification of the ``theory/`` bounds against the production optimizer.

``pytest verify/`` runs the properties in ``verify/test_*.py`` (see ``verify/README.md``).
The property checks themselves live in :mod:`verify.properties` as plain functions over a
*system under test* (:class:`verify.properties.System`), so the mutation tests in
:mod:`verify.test_mutants` can call exactly the same checks against the deliberately broken
variants of :mod:`verify.mutants`.
"""
