"""The web page in a real browser (Debian's headless Chromium, driven by Selenium) against `quire serve`: upload
a PDF through the file input, watch the progress reach the end, then see every page's image with its region boxes
beside its recognised text, its pictures included. The screenshot is kept for a person to look at; its path is printed.

The service runs embedded on the tiny checkpoint, with the PDF's own text for its text regions
(QUIRE_TEXT_LAYER=auto), so the text beside each page is the page's real text rather than the tiny model's noise,
and it requires API keys, so the page's key field is part of what is tested.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.local_stack import free_port
from tests.service.conftest import Service, quire_env, start, wait_for_health

PDF = Path(__file__).resolve().parents[1] / "fixtures" / "corpus" / "pdflatex-4-pages.pdf"
PICTURE_PDF = PDF.with_name("pdflatex-image.pdf")
SCREENSHOT = Path(tempfile.gettempdir()) / "quire-web-page.png"
# Every status the page shows, in order: progress was shown on the way, not only the end.
SEEN_STATUSES = """
window.seenStatuses = [];
new MutationObserver(() => {
  const text = document.getElementById("status-text").textContent;
  if (text && text !== window.seenStatuses.at(-1)) window.seenStatuses.push(text);
}).observe(document.getElementById("status-text"), {childList: true, characterData: true, subtree: true});
"""
INSTALL = "`make test` installs them as root (scripts/test-setup), or apt-get install -y chromium chromium-driver"


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> dict[str, str]:
    root = tmp_path_factory.mktemp("web")
    return quire_env(root, tiny_checkpoint, QUIRE_TEXT_LAYER="auto", QUIRE_DPI="72", QUIRE_API_KEYS="required")


@pytest.fixture(scope="module")
def service(environment: dict[str, str], processes) -> Service:
    root, port = Path(environment["QUIRE_CACHE_DIR"]), free_port()
    service = Service(f"http://127.0.0.1:{port}", f"sqlite:///{root / 'quire.db'}", [root / "serve.log"])
    start(processes, service.logs[0], environment, "serve", "--port", str(port))
    wait_for_health(service, processes)
    return service


@pytest.fixture(scope="module")
def api_key(service: Service, environment: dict[str, str]) -> str:
    created = subprocess.run([sys.executable, "-m", "pipeline.cli", "keys", "create", "--tenant", "web"],
                             env=environment, capture_output=True, text=True, check=True)
    return created.stdout.strip()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.fail(f"the browser test needs Debian's chromium and chromium-driver on PATH: {INSTALL}")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=DriverService(executable_path=driver))
    yield browser
    browser.quit()


def test_without_its_key_the_page_says_the_upload_was_refused(browser: WebDriver, service: Service) -> None:
    browser.get(f"{service.url}/")
    browser.execute_script("sessionStorage.clear()")
    browser.find_element(By.ID, "file").send_keys(str(PDF))
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "status").get_attribute("data-status"))
    assert browser.find_element(By.ID, "status").get_attribute("data-status") == "error"
    assert browser.find_element(By.ID, "status-error").text.startswith("401 unauthorized")


def test_upload_progress_and_pages_with_their_boxes_and_text(browser: WebDriver, service: Service, api_key: str,
                                                             tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    browser.get(f"{service.url}/")
    browser.find_element(By.ID, "api-key").send_keys(api_key)
    browser.refresh()  # the key is kept for the tab and sent from then on
    assert browser.find_element(By.ID, "api-key").get_attribute("value") == api_key
    browser.execute_script(SEEN_STATUSES)
    browser.find_element(By.ID, "file").send_keys(str(PDF))
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 120).until(
        lambda b: b.find_element(By.ID, "pages").get_attribute("data-complete")
        or b.find_element(By.ID, "status").get_attribute("data-status") == "error",
        f"the page did not finish\n{service.tail()}")

    assert browser.find_element(By.ID, "status").get_attribute("data-status") == "succeeded"
    seen = browser.execute_script("return window.seenStatuses")
    assert seen[0] == "uploading" and seen[-1] == "succeeded" and {"queued", "processing"} & set(seen[1:-1]), seen
    assert "pages 4/4" in browser.find_element(By.ID, "status-counts").text
    assert browser.find_element(By.ID, "progress").get_attribute("value") == "1"
    pages = browser.find_elements(By.CSS_SELECTOR, "#pages .page")
    assert [page.get_attribute("data-page") for page in pages] == ["1", "2", "3", "4"]
    first = pages[0]
    image = first.find_element(By.CSS_SELECTOR, "img.page-image")
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image) > 0
    assert image.is_displayed() and image.size["width"] > 300
    boxes = first.find_elements(By.CSS_SELECTOR, ".box")
    assert boxes and all(box.is_displayed() for box in boxes)
    assert all(_inside(box.rect, image.rect) for box in boxes)
    assert boxes[0].find_element(By.CSS_SELECTOR, ".box-label").text == "1 text"
    text = first.find_element(By.CSS_SELECTOR, ".markdown")
    assert text.is_displayed() and "Hello, here is some text without a meaning" in text.text

    SCREENSHOT.write_bytes(_full_page_screenshot(browser, tmp_path / "page.png").read_bytes())
    with capsys.disabled():
        print(f"\nweb page screenshot: {SCREENSHOT}")


def test_a_picture_shows_in_the_text_as_its_crop_fetched_with_the_key(browser: WebDriver, service: Service,
                                                                      api_key: str) -> None:
    browser.get(f"{service.url}/")
    browser.execute_script("sessionStorage.setItem('quire.apiKey', arguments[0])", api_key)
    browser.find_element(By.ID, "file").send_keys(str(PICTURE_PDF))
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 120).until(
        lambda b: b.find_element(By.ID, "pages").get_attribute("data-complete")
        or b.find_element(By.ID, "status").get_attribute("data-status") == "error",
        f"the page did not finish\n{service.tail()}")
    picture = browser.find_element(By.CSS_SELECTOR, "#pages .page .markdown img")
    assert picture.get_attribute("src").startswith("blob:") and picture.is_displayed()
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", picture) > 0


def _inside(box: dict[str, float], image: dict[str, float]) -> bool:
    """The box lies on the image (a pixel of rounding allowed) and has an area."""
    return (box["width"] > 0 and box["height"] > 0 and box["x"] >= image["x"] - 1 and box["y"] >= image["y"] - 1
            and box["x"] + box["width"] <= image["x"] + image["width"] + 1
            and box["y"] + box["height"] <= image["y"] + image["height"] + 1)


def _full_page_screenshot(browser: WebDriver, path: Path) -> Path:
    """Chromium's screenshots are of the window: grow it to the document's height first."""
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(height, 8000))
    browser.execute_script("window.scrollTo(0, 0)")
    assert browser.save_screenshot(str(path))
    return path
