"""Where the course is published: its Colab, Kaggle and Binder links, from one setting.

The setting is `Repository` in pyproject.toml's `[project.urls]`: a GitHub address,
`https://github.com/OWNER/NAME` (branch `main`) or `https://github.com/OWNER/NAME/tree/BRANCH`.
`build` makes each lesson's badges and the line that installs the course in a hosted
kernel from it. No setting, no badges and no install line: never a link to nowhere.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
KAGGLE_BADGE = "https://kaggle.com/static/images/open-in-kaggle.svg"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
GITHUB = re.compile(
    r"https://github\.com/(?P<owner>[\w.-]+)/(?P<name>[\w.-]+?)(?:\.git)?"
    r"(?:/tree/(?P<branch>[\w./-]+?))?/?"
)

AUTHOR_TEXT = {
    "not_github": (
        "pyproject.toml: [project.urls] Repository = {url!r} is not a GitHub address. Colab "
        "and Kaggle open notebooks from GitHub: write https://github.com/OWNER/NAME (or "
        ".../tree/BRANCH), or remove the setting to build lessons without badges."
    ),
}


class LinkError(ValueError):
    """The repository setting cannot make working links; the message says what to write."""


@dataclass(frozen=True)
class Repository:
    """A public GitHub repository holding the course, and the links into it."""

    owner: str
    name: str
    branch: str = "main"

    @property
    def url(self) -> str:
        return f"https://github.com/{self.owner}/{self.name}"

    def blob(self, path: str) -> str:
        return f"{self.url}/blob/{self.branch}/{path}"

    def colab(self, path: str) -> str:
        """Colab opens this notebook of the repository."""
        return f"https://colab.research.google.com/github/{self.owner}/{self.name}/blob/{self.branch}/{path}"

    def kaggle(self, path: str) -> str:
        """Kaggle imports this notebook of the repository into a new notebook."""
        return f"https://kaggle.com/kernels/welcome?src={self.blob(path)}"

    def binder(self, path: str) -> str:
        """Binder builds the repository and opens this file in JupyterLab."""
        return (
            f"https://mybinder.org/v2/gh/{self.owner}/{self.name}/{self.branch}"
            f"?labpath={quote(path, safe='')}"
        )

    @property
    def requirement(self) -> str:
        """What pip installs the course from: this branch of the repository."""
        return f"ddp-basics @ git+{self.url}@{self.branch}"

    def badges(self, path: str) -> str:
        """Markdown: 'Open in Colab' and 'Open in Kaggle' badges for this notebook."""
        return (
            f"[![Open In Colab]({COLAB_BADGE})]({self.colab(path)}) "
            f"[![Open in Kaggle]({KAGGLE_BADGE})]({self.kaggle(path)})"
        )


def _project(pyproject: Path) -> dict:
    return tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))["project"]


def repository(pyproject: Path) -> Repository | None:
    """The Repository of pyproject.toml's [project.urls], or None where there is none."""
    urls = _project(pyproject).get("urls", {})
    # Label names compare as PEP 753 normalizes them: "Repository", "repository", "Re-pository".
    found = [v for k, v in urls.items() if re.sub(r"[\W_]", "", k).lower() == "repository"]
    url = (found[0] if found else "").strip()
    if not url:
        return None
    m = GITHUB.fullmatch(url)
    if not m:
        raise LinkError(AUTHOR_TEXT["not_github"].format(url=url))
    return Repository(m["owner"], m["name"], m["branch"] or "main")


def torch_range(pyproject: Path) -> str:
    """The torch requirement of the course, e.g. 'torch>=2.8,<2.16'."""
    (torch,) = [r for r in _project(pyproject)["dependencies"] if re.match(r"torch\b", r)]
    return torch.replace(" ", "")
