"""The documentation's tooling, apart from the command lines of experiments/: the API reference's
tables (`python -m tools.api_tables`), the study pages' tables (`python -m tools.pages`) and the
tutorials' stored notebooks (`python -m tools.tutorials`)."""
