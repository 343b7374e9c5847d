# The README's two commands: `make demo` (quantir's main job on the bundled model) and
# `make test` (the whole test suite: Rust, then the Python package's pytest). Both install
# what they need first.
.PHONY: deps demo test bench fmt

deps:
	bash scripts/install-deps.sh

demo: deps
	bash scripts/demo.sh

test: deps
	cargo test --workspace
	bash scripts/python-tests.sh

bench: deps
	cargo bench --workspace

fmt:
	cargo fmt --all
