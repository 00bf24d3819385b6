# The two commands of README.md, plus the quality gates that `make test` runs first.
.PHONY: run test bootstrap lint

run: bootstrap
	.venv/bin/python scripts/run.py

test: bootstrap lint
	.venv/bin/python scripts/test_session.py $(PYTEST_ARGS)

bootstrap:
	bash scripts/bootstrap.sh

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports
