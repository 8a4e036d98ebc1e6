"""A page's Markdown as HTML for the web page: what a model recognised is untrusted, so only table tags survive from
its raw HTML, every other tag shows as text or goes, and formulas become MathML."""

from __future__ import annotations

import re

from api.markdown_html import markdown_html

TAG = re.compile(r"<\s*/?\s*([a-zA-Z][\w-]*)")


def tags(html: str) -> set[str]:
    return {name.lower() for name in TAG.findall(html)}


def test_markdown_becomes_html() -> None:
    html = markdown_html("# Title\n\n## 2 Setup\n\nSome *emphasis* and `code`.\n\n- one\n- two")
    assert "<h1>Title</h1>" in html and "<h2>2 Setup</h2>" in html
    assert "<em>emphasis</em>" in html and "<code>code</code>" in html and "<li>one</li>" in html


def test_a_table_keeps_its_cells_and_spans_and_nothing_else() -> None:
    table = ('<table><tr><th colspan="2" style="color:red" onclick="steal()">Head</th></tr>'
             '<tr><td rowspan="2">a &amp; b<script>steal()</script><img src=x onerror=steal()></td><td>c</td></tr>'
             "</table>")
    html = markdown_html(f"Before\n\n{table}\n\nAfter")
    assert tags(html) == {"p", "table", "tbody", "tr", "th", "td"}
    assert '<th colspan="2">Head</th>' in html and '<td rowspan="2">a &amp; b</td>' in html
    assert "steal" not in html and "style" not in html


def test_tags_in_recognised_text_show_as_text() -> None:
    html = markdown_html('if a<b and c>d then <script>alert(1)</script> <img src="x" onerror="alert(1)">')
    assert tags(html) == {"p"}
    assert "a&lt;b and c&gt;d" in html and "&lt;script&gt;" in html


def test_raw_html_blocks_other_than_tables_lose_their_tags() -> None:
    html = markdown_html('<!-- image -->\n\n<div onclick="steal()"><a href="https://x.test">kept text</a></div>\n\n'
                         "<iframe src=\"https://x.test\"></iframe>")
    assert tags(html) == set() and "kept text" in html and "image" not in html


def test_links_keep_safe_schemes_only_and_images_are_not_fetched() -> None:
    html = markdown_html("[ok](https://example.org) [bad](javascript:alert(1)) ![pixel](https://tracker.test/p.png)")
    assert '<a href="https://example.org" rel="noopener noreferrer">ok</a>' in html
    assert 'href="javascript' not in html and "<img" not in html


def test_an_image_shows_only_where_it_is_one_of_the_picture_crops_named() -> None:
    crop = "/v1/documents/d1/pages/1/regions/2/image"
    html = markdown_html(f'![axis \\[m\\] "x"]({crop})\n\n![pixel](https://tracker.test/p.png)', {crop})
    assert f'<img src="{crop}" alt="axis [m] &quot;x&quot;">' in html
    assert html.count("<img") == 1 and "<p>pixel</p>" in html


def test_formulas_become_mathml() -> None:
    html = markdown_html("Inline $x^2$ here.\n\n$$\n\\frac{a}{b} \\tag{3.1}\n$$")
    assert '<span class="math inline"><math display="inline">' in html and "<msup><mi>x</mi><mn>2</mn></msup>" in html
    assert '<div class="math block">' in html and "<mfrac>" in html and "(3.1)" in html


def test_latex_the_converter_refuses_shows_as_code() -> None:
    html = markdown_html("$$\n\\left( x < y\n$$")
    assert '<code class="latex">\\left( x &lt; y</code>' in html and "<math" not in html


def test_a_formula_cannot_smuggle_markup() -> None:
    html = markdown_html("$\\text{<script>alert(1)</script><b>bold</b>} + \\href{javascript:alert(1)}{x}$")
    assert "script" not in html and "href" not in html and "<b>" not in html and "<math" in html


def test_dollar_amounts_are_not_formulas() -> None:
    assert "<math" not in markdown_html("It cost $5 and $10.")
