"""Console scripts, one module each: attnflow-train, -eval, -predict, -translate, -average,
-report and -blocks (``[project.scripts]`` in pyproject.toml)."""
