// MathJax 3's settings for pymdownx.arithmatex (generic mode writes \( \) and \[ \] inside
// elements of class "arithmatex"); the script itself is served by the site (docs/hooks/).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};
