"""The visible text of an HTML page, in sections at its headings (documents/extract.py).

Its own module so that html.parser is imported where a page is read, not with extract.py (which
the app's process imports to know a file's kind)."""

from __future__ import annotations

from html.parser import HTMLParser


class HtmlText(HTMLParser):
    """Visible text of a page in sections at its headings; scripts and styles left out."""

    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head"})
    BLOCK = frozenset(
        {"p", "div", "br", "li", "tr", "td", "th", "section", "article", "table", "ul", "ol"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[tuple[str, list[str]]] = [("", [])]
        self.skipping = 0
        self.title: list[str] = []
        self.in_title = False
        self.heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in self.SKIP:
            self.skipping += 1
        elif tag in ("h1", "h2", "h3"):
            self.heading = []
        elif tag in self.BLOCK:
            self.sections[-1][1].append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in ("h1", "h2", "h3") and self.heading is not None:
            text = " ".join("".join(self.heading).split())
            self.sections.append((text[:80], [text, "\n"]))
            self.heading = None

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif self.skipping:
            return
        elif self.heading is not None:
            self.heading.append(data)
        else:
            self.sections[-1][1].append(data)
