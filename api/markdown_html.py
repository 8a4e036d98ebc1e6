"""A page's Markdown as HTML for the web page, safe to insert into it.

The Markdown holds what a model read, so every character of it is untrusted. Text is escaped by the Markdown
parser; raw HTML inline is shown as the text it is; a raw HTML block keeps table tags only (tables are HTML in the
Markdown because Markdown tables cannot span cells); `$…$` and `$$…$$` become MathML (latex2mathml, which Chromium
and Firefox draw natively); an image is shown only where it links to one of the page's own picture crops, which the
caller names, so the browser never fetches a URL a model wrote. Whatever that produces then passes an allow-list
sanitizer (ammonia, through nh3), so the page never gets a tag, attribute or URL scheme outside the lists below.
"""

from __future__ import annotations

import html
from collections.abc import Sequence, Set
from functools import cache
from typing import Any

import nh3
from latex2mathml.converter import convert as latex_to_mathml
from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin

TABLE_TAGS = frozenset({"table", "caption", "thead", "tbody", "tfoot", "tr", "th", "td"})
TABLE_ATTRIBUTES = {"th": {"colspan", "rowspan"}, "td": {"colspan", "rowspan"}}
MARKDOWN_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "em", "strong", "code", "pre", "blockquote",
                           "ul", "ol", "li", "hr", "br", "a", "span", "div"})
MATHML_TAGS = frozenset({"math", "semantics", "annotation", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace",
                         "mfrac", "msqrt", "mroot", "msub", "msup", "msubsup", "munder", "mover", "munderover",
                         "mmultiscripts", "mprescripts", "none", "mtable", "mtr", "mtd", "mstyle", "mpadded",
                         "mphantom", "menclose", "merror"})
MATHML_ATTRIBUTES = frozenset({"display", "mathvariant", "displaystyle", "scriptlevel", "stretchy", "fence",
                               "separator", "lspace", "rspace", "minsize", "maxsize", "movablelimits", "largeop",
                               "symmetric", "form", "accent", "accentunder", "linethickness", "columnalign",
                               "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines", "frame",
                               "width", "height", "depth", "voffset", "notation", "columnspan", "rowspan"})
ALLOWED_TAGS = TABLE_TAGS | MARKDOWN_TAGS | MATHML_TAGS | {"img"}
ALLOWED_ATTRIBUTES = {
    **{tag: set(MATHML_ATTRIBUTES) for tag in MATHML_TAGS},
    **TABLE_ATTRIBUTES,
    "a": {"href", "title"},
    "img": {"src", "alt"},
    "span": {"class"},
    "div": {"class"},
    "code": {"class"},
}


def markdown_html(markdown: str, images: Set[str] = frozenset()) -> str:
    """The Markdown rendered and sanitized: an HTML fragment; `images` are the URLs an image may show (the page's
    picture crops), any other image shows as its alt text."""
    rendered = _parser().render(markdown, {"images": images})
    return nh3.clean(rendered, tags=set(ALLOWED_TAGS), attributes=ALLOWED_ATTRIBUTES)


@cache
def _parser() -> MarkdownIt:
    """CommonMark with raw HTML parsed, so the rules below see it."""
    parser = MarkdownIt("commonmark", {"html": True})
    dollarmath_plugin(parser, allow_labels=False, allow_digits=False, renderer=_math)
    parser.add_render_rule("image", _own_images_only)
    parser.add_render_rule("html_inline", _inline_html_as_text)
    parser.add_render_rule("html_block", _tables_only)
    return parser


def _math(latex: str, options: dict[str, Any]) -> str:
    """MathML, or the LaTeX as code when the converter gives up: it raises assorted errors on the malformed LaTeX
    a model can write, and one bad formula must not cost the page."""
    try:
        return latex_to_mathml(latex, display="block" if options["display_mode"] else "inline")
    except Exception:  # any converter failure means: show the source
        return f'<code class="latex">{html.escape(latex)}</code>'


def _own_images_only(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    """A picture crop the caller named becomes an image; an image the model wrote would make the browser fetch its
    URL (a tracker), so it is only its alt text."""
    token = tokens[idx]
    alt = html.escape(renderer.renderInlineAsText(token.children or [], options, env))
    src = token.attrGet("src")
    if src in env["images"]:
        return f'<img src="{html.escape(str(src))}" alt="{alt}">'
    return alt


def _inline_html_as_text(_renderer: Any, tokens: Sequence[Token], idx: int, _options: Any, _env: Any) -> str:
    """Inline tags only come from recognised text ("a<b and c>d" parses as a tag): show them as written."""
    return html.escape(tokens[idx].content)


def _tables_only(_renderer: Any, tokens: Sequence[Token], idx: int, _options: Any, _env: Any) -> str:
    """A table region's HTML keeps its table tags and spans; any other tag (and any comment) is dropped."""
    return nh3.clean(tokens[idx].content, tags=set(TABLE_TAGS), attributes=TABLE_ATTRIBUTES)
