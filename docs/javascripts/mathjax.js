// MathJax configuration for pymdownx.arithmatex (generic mode): the loss formulas on the
// algorithm pages are written as \( ... \) and \[ ... \].
window.MathJax = {
  tex: {inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]],
        processEscapes: true, processEnvironments: true},
  options: {ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex"}
};
document$.subscribe(() => { MathJax.typesetPromise(); });
