"""Raises an exception whose own __str__ raises, as a buggy exception class in a library can."""


class ShardError(Exception):
    def __str__(self):
        raise KeyError("shard_id")


def load():
    raise ShardError()


load()
