"""The paper the kit checks, named once: title, authors, arXiv id, the version whose numbers
the kit quotes and its date, and the one number not printed in that version's text. The report
page, every notebook's first cell, the docs' home page and the cited data files
(kit/experiments/evidence_data: `PAPER.short`, the year of the quoted version) all name it as
`PAPER` does; tests hold them to it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass


@dataclass(frozen=True)
class Paper:
    """A paper as the kit cites it: the numbers quoted are those of `version`, dated `date`,
    but for those `from_figure` names (read from the authors' figure, marked so wherever the
    kit shows them)."""

    title: str
    authors: str
    arxiv: str
    version: str
    date: str
    from_figure: str = ""

    @property
    def short(self) -> str:
        """Authors and the quoted version's year, as a data file's `study` cites it: 'Yang,
        Zhang, Bottou 2026'."""
        return f"{self.authors} {self.date.rsplit(' ', 1)[-1]}"

    @property
    def quoted(self) -> str:
        """Which numbers are this version's: all, but for those read from a figure."""
        rest = (
            f", but for {self.from_figure}, read from the authors' figure and marked so"
            if self.from_figure
            else ""
        )
        return f"the numbers quoted are this version's{rest}"

    @property
    def arxiv_id(self) -> str:
        """The arXiv id with its version, as every quoted number's source names it:
        '2506.18221v3'."""
        return f"{self.arxiv}{self.version}"

    @property
    def url(self) -> str:
        """The abstract page of the quoted version."""
        return f"https://arxiv.org/abs/{self.arxiv_id}"

    def markdown(self) -> str:
        """One line naming the paper, its version and date, for a notebook or a docs page."""
        return (
            f"Paper: {self.authors}, *{self.title}*, [arXiv {self.arxiv_id}]({self.url}) "
            f"({self.date}); {self.quoted}."
        )

    def html(self) -> str:
        """The same line as HTML, for the report page."""
        return (
            f'<p class="paper">Paper: {html.escape(self.authors)}, <em>{html.escape(self.title)}'
            f'</em>, <a href="{self.url}">arXiv {self.arxiv_id}</a> ({html.escape(self.date)}); '
            f"{html.escape(self.quoted)}.</p>"
        )


PAPER = Paper(
    title="These Are Not All the Features You Are Looking For: A Fundamental Bottleneck in "
    "Supervised Pretraining",
    authors="Yang, Zhang, Bottou",
    arxiv="2506.18221",
    version="v3",
    date="6 February 2026",
    from_figure="Table 3's cat4 on CIFAR-100 (missing from its text as extracted)",
)
