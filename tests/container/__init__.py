# A package, so that this folder's conftest.py is `container.conftest` and never replaces tests/conftest.py,
# which the other tests import as `conftest`.
