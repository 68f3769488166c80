// Typeset the math of every page with KaTeX, served from the site itself (docs/vendor/katex),
// so that formulas render offline. Markdown pages reach here with their math already wrapped
// by pymdownx.arithmatex as \( \) and \[ \]; the chapter pages' prose comes through the same
// Markdown, and $ $ / $$ $$ catch any math written outside it. Code blocks are left alone.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false,
  });
});
