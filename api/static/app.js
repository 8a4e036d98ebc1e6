// The web page's one script: upload through the public API, poll the document's status, then show every page.
// Everything a model recognised reaches the DOM as textContent, except each page's HTML, which the server renders
// from Markdown and sanitizes (GET /v1/documents/{id}/pages/{n}/html); its images (picture crops) are fetched with
// the API key, as the page image is, since a plain <img> request would carry none.
"use strict";

const FINAL = new Set(["succeeded", "partial", "failed", "canceled"]);
const POLL_MS = 500;
const KEY_STORAGE = "quire.apiKey";

const $ = (id) => document.getElementById(id);

function authHeaders() {
  const key = sessionStorage.getItem(KEY_STORAGE);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function request(path, options = {}) {
  const response = await fetch(path, { ...options, headers: { ...authHeaders(), ...options.headers } });
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    const problem = body && body.error ? `${body.error.code}: ${body.error.message}` : response.statusText;
    throw new Error(`${response.status} ${problem}`);
  }
  return response;
}

async function upload(file) {
  const form = new FormData();
  form.append("file", file, file.name);
  return (await request("/v1/documents", { method: "POST", body: form })).json();
}

async function waitUntilFinished(id) {
  for (;;) {
    const status = await (await request(`/v1/documents/${encodeURIComponent(id)}`)).json();
    showStatus(status);
    if (FINAL.has(status.status)) return status;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

function showStatus(status) {
  const { pages, regions } = status.progress;
  $("status").dataset.status = status.status;
  $("status-name").textContent = status.filename;
  $("status-text").textContent = status.status;
  $("status-counts").textContent =
    `pages ${pages.done}/${pages.total ?? "?"}, regions ${regions.done}/${regions.total ?? "?"}`;
  const progress = $("progress");
  if (FINAL.has(status.status)) progress.value = 1;
  else if (regions.total) progress.value = regions.done / regions.total;
  else if (pages.total) progress.value = pages.done / pages.total;
  else progress.removeAttribute("value");
  if (status.error) showError(`${status.error.code}: ${status.error.message}`);
}

function showError(message) {
  $("status-error").textContent = message;
  $("status-error").hidden = false;
}

async function showPages(status) {
  const id = encodeURIComponent(status.id);
  for (let number = 1; number <= (status.page_count ?? 0); number++) {
    const article = pageArticle(number);
    $("pages").append(article);
    try {
      const page = await (await request(`/v1/documents/${id}/pages/${number}`)).json();
      await fillPage(article, page, `/v1/documents/${id}/pages/${number}`);
    } catch (error) {
      article.querySelector(".page-error").textContent = error.message;
    }
  }
}

function pageArticle(number) {
  const article = element("article", "page");
  article.dataset.page = number;
  article.append(element("h2", "", `Page ${number}`), element("p", "page-error error"));
  const body = element("div", "page-body");
  body.append(element("figure", "page-figure"), element("div", "markdown"));
  article.append(body);
  return article;
}

async function fillPage(article, page, path) {
  article.dataset.status = page.status;
  if (page.error) article.querySelector(".page-error").textContent = `${page.error.code}: ${page.error.message}`;
  const [image, html] = await Promise.all([
    request(`${path}/image`).then((response) => response.blob()).catch(() => null),
    request(`${path}/html`).then((response) => response.text()),
  ]);
  if (image) drawPage(article.querySelector(".page-figure"), page, URL.createObjectURL(image));
  await showMarkdown(article.querySelector(".markdown"), html);
}

// A template's content is inert: its images are not requested until they have their blob URLs.
async function showMarkdown(container, html) {
  const template = document.createElement("template");
  template.innerHTML = html; // sanitized by the server, see the top of this file
  await Promise.all([...template.content.querySelectorAll("img")].map(async (picture) => {
    const crop = await request(picture.getAttribute("src")).then((response) => response.blob()).catch(() => null);
    if (crop) picture.src = URL.createObjectURL(crop);
    else picture.removeAttribute("src");
  }));
  container.replaceChildren(template.content);
}

// Boxes are placed in percent of the page's pixel size, so they stay on their regions at any displayed size.
function drawPage(figure, page, imageUrl) {
  const image = element("img", "page-image");
  image.src = imageUrl;
  image.alt = `Page ${page.number}`;
  figure.append(image);
  for (const region of page.regions) {
    const [x0, y0, x1, y1] = region.bbox_px;
    const box = element("div", `box kind-${kind(region.label)}`);
    Object.assign(box.style, {
      left: `${(100 * x0) / page.width_px}%`, top: `${(100 * y0) / page.height_px}%`,
      width: `${(100 * (x1 - x0)) / page.width_px}%`, height: `${(100 * (y1 - y0)) / page.height_px}%`,
    });
    box.title = region.text ?? region.latex ?? region.label;
    box.append(element("span", "box-label", `${region.order + 1} ${region.label}`));
    figure.append(box);
  }
}

function kind(label) {
  if (label === "table") return "table";
  if (label.includes("formula")) return "formula";
  if (label.includes("title")) return "title";
  if (["image", "chart", "seal", "header_image", "footer_image"].includes(label)) return "picture";
  if (["header", "footer", "number", "footnote", "aside_text"].includes(label)) return "furniture";
  return "text";
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

async function onSubmit(event) {
  event.preventDefault();
  const file = $("file").files[0];
  if (!file) return;
  $("submit").disabled = true;
  $("pages").replaceChildren();
  delete $("pages").dataset.complete;
  $("status").hidden = false;
  $("status-error").hidden = true;
  $("status-name").textContent = file.name;
  $("status-text").textContent = "uploading";
  $("status-counts").textContent = "";
  try {
    const accepted = await upload(file);
    await showPages(await waitUntilFinished(accepted.id));
    $("pages").dataset.complete = "true";
  } catch (error) {
    $("status").dataset.status = "error";
    showError(error.message);
  } finally {
    $("submit").disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const key = $("api-key");
  key.value = sessionStorage.getItem(KEY_STORAGE) ?? "";
  key.addEventListener("input", () => {
    if (key.value) sessionStorage.setItem(KEY_STORAGE, key.value);
    else sessionStorage.removeItem(KEY_STORAGE);
  });
  $("upload").addEventListener("submit", onSubmit);
});
