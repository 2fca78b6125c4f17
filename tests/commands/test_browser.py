"""``gnn-treelstm serve`` in a real headless browser: type a sentence, get the drawn tree.

Needs Debian's Chromium and its driver (``apt-get install chromium chromium-driver``) and
``pip install selenium``; skips with the reason when any is missing. Nothing is downloaded
(Selenium Manager runs offline: the driver path is given explicitly), and the browser talks
to 127.0.0.1 only.
"""

from __future__ import annotations

import shutil

import pytest

from gnn_treelstm.commands import serve as S
from tests.commands.test_serve import Served, require_spacy, tiny_sample_run

SENTENCE = "The acting is wooden , but the story is a gorgeous and witty surprise ."
TIMEOUT = 60  # seconds, for every wait


def _browser_parts() -> tuple[str, str]:
    """(chromium, chromedriver) paths, or a skip naming what is missing."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install selenium)")
    chrome = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    driver = shutil.which("chromedriver")
    if chrome is None or driver is None:
        missing = [n for n, p in (("chromium", chrome), ("chromedriver", driver)) if p is None]
        pytest.skip(f"no {' or '.join(missing)} on PATH "
                    "(apt-get install chromium chromium-driver)")
    return chrome, driver


@pytest.fixture(scope="module")
def browser():
    chrome, driver_path = _browser_parts()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-proxy-server", "--window-size=1400,900", "--disable-extensions"):
        opts.add_argument(arg)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SE_OFFLINE", "true")  # Selenium Manager must never fetch a browser/driver
        try:
            drv = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
        except Exception as e:  # pragma: no cover - a broken local install
            pytest.skip(f"headless chromium did not start: {str(e).splitlines()[0]}")
        drv.set_page_load_timeout(TIMEOUT)
        drv.set_script_timeout(TIMEOUT)
        yield drv
        drv.quit()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_spacy()
    run = tiny_sample_run(tmp_path_factory)
    served = Served(S.load_explorer(run))
    yield served
    served.stop()


def _parse_node_count(explorer: S.Explorer, sentence: str) -> int:
    """The node count of the sentence's tree, through the library path the server uses
    (spaCy parse -> the checkpoint's tree kind), not through the page."""
    from gnn_treelstm.datasets.dependency import parse_texts

    (graph,) = explorer.predictor.graphs(parse_texts(explorer.nlp, [sentence]))
    return graph.num_nodes()


def test_typed_sentence_is_drawn_with_every_node(browser, server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.url + "/")
    box = WebDriverWait(browser, TIMEOUT).until(
        EC.presence_of_element_located((By.ID, "sentence")))
    box.send_keys(SENTENCE)
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, TIMEOUT).until(
        EC.presence_of_element_located((By.CSS_SELECTOR, "#result svg g.node")))
    assert browser.current_url.rstrip("/") == server.url  # drawn by the script, no reload
    nodes = browser.find_elements(By.CSS_SELECTOR, "#result svg g.node")
    expected = _parse_node_count(server.server.RequestHandlerClass.explorer, SENTENCE)
    assert len(nodes) == expected
    labels = {n.get_attribute("data-label") for n in nodes}
    assert labels <= set(S.treesvg.SST_LABEL_NAMES) and "" not in labels
    words = [n.get_attribute("data-word") for n in nodes if n.get_attribute("data-word")]
    assert " ".join(words) == SENTENCE  # leaves in sentence order
    assert browser.find_element(By.CSS_SELECTOR, ".prediction").text.startswith("prediction")
    assert browser.find_element(By.ID, "error").text == ""

    # bad input: the page shows the server's message and no tree
    box.clear()
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, TIMEOUT).until(
        EC.text_to_be_present_in_element((By.ID, "error"), "the sentence is empty"))
    assert browser.find_elements(By.CSS_SELECTOR, "#result svg") == []
