"""Sphinx configuration of the course's website: `make site` (see docs/authors.md).

The pages are built by ddp_helpers.authoring.website from lessons/ and solutions/; this file
only says how they look. Colab and Binder buttons appear when pyproject.toml names the
repository ([project.urls] Repository); without that setting there are none.
"""

from pathlib import Path

from ddp_helpers.authoring.links import repository
from ddp_helpers.authoring.website import course_lexer, theme_options

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = repository(ROOT / "pyproject.toml")  # the setting `build` makes badges from

project = "DDP Basics"
author = "the DDP Basics authors"
html_title = "DDP Basics"
extensions = ["myst_nb"]
exclude_patterns = ["_build"]

# The stored outputs of the solutions are the pages' outputs: nothing runs at build time.
nb_execution_mode = "off"
nb_merge_streams = True  # one block per cell, as the notebook shows it

html_theme = "sphinx_book_theme"
html_theme_options = theme_options(REPOSITORY)
html_copy_source = False  # the notebooks are in the repository; the site is for reading
html_show_sourcelink = False
html_show_copyright = False
html_static_path = ["_static"]
html_css_files = ["course.css"]

if REPOSITORY is not None:
    tags.add("launch")  # noqa: F821 - Sphinx provides `tags` to conf.py


def setup(app):
    app.add_lexer("ipython3", course_lexer())  # a `%%ddp` cell's body highlighted as Python
