"""Shared by the logger tests: a clean module-level logger around every test, and a CSV
reader."""
import csv

import pytest

from rlfast.utils.logging import logger


@pytest.fixture(autouse=True)
def clean_logger():
    logger.reset()
    yield
    logger.reset()


def read_csv(path):
    """(header, rows) of a CSV file, every cell a string."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = list(reader)
    return header, rows
