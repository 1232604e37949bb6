// Interactive flamegraphs (analysis/flamegraph.py draws them): click a frame to zoom into its subtree, "Reset
// Zoom" to see all again, "Search" for a substring or a /regular expression/ to mark the frames whose names match
// and print the share of the graph they account for.  The same script runs inside a standalone SVG file and,
// once, in an HTML report holding several graphs.  It reads only what the SVG holds (geometry, weights, names
// in <title>) and writes text with textContent: nothing in a frame's name is ever parsed as markup.
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var CHAR_WIDTH = 7, MIN_LABEL_WIDTH = 40;  // as flamegraph.py labels frames
  var MATCH_FILL = "rgb(230,0,230)";

  function label(name, width) {
    if (width <= MIN_LABEL_WIDTH) return "";
    var chars = Math.floor(width / CHAR_WIDTH);
    return name.length <= chars ? name : name.slice(0, Math.max(chars - 2, 0)) + "..";
  }

  // "/pattern/flags" is a regular expression, anything else a substring; null for an invalid expression
  function matcher(query) {
    var m = /^\/(.*)\/([a-z]*)$/.exec(query);
    if (!m) return function (name) { return name.indexOf(query) >= 0; };
    try {
      var re = new RegExp(m[1], m[2].replace("g", ""));
      return function (name) { return re.test(name); };
    } catch (e) {
      return null;
    }
  }

  function setup(svg) {
    if (svg.getAttribute("data-interactive")) return;
    svg.setAttribute("data-interactive", "1");
    var left = +svg.getAttribute("data-left"), usable = +svg.getAttribute("data-usable");
    var total = +svg.getAttribute("data-total"), unit = svg.getAttribute("data-unit");
    var reset = svg.querySelector(".fg-reset"), searchButton = svg.querySelector(".fg-search");
    var matched = svg.querySelector(".fg-matched");
    // frames in document order are in pre-order: a frame's subtree follows it, deeper than it
    var frames = Array.prototype.map.call(svg.querySelectorAll("g.frame"), function (g) {
      var rect = g.querySelector("rect"), title = g.querySelector("title").textContent;
      return {g: g, rect: rect, text: g.querySelector("text"), name: title.slice(0, title.lastIndexOf(" (")),
              depth: +g.getAttribute("data-depth"), weight: +g.getAttribute("data-weight"),
              x: +rect.getAttribute("x"), width: +rect.getAttribute("width"), fill: rect.getAttribute("fill")};
    });

    function place(f, x, width) {
      f.rect.setAttribute("x", x.toFixed(3));
      f.rect.setAttribute("width", width.toFixed(3));
      var text = label(f.name, width);
      if (!f.text && text) {
        f.text = document.createElementNS(SVGNS, "text");
        f.text.setAttribute("y", String(+f.rect.getAttribute("y") + +f.rect.getAttribute("height") - 3));
        f.g.appendChild(f.text);
      }
      if (f.text) {
        f.text.setAttribute("x", (x + 3).toFixed(3));
        f.text.textContent = text;
      }
    }

    function show(f, visible, parent) {
      f.g.setAttribute("display", visible ? "inline" : "none");
      f.g.setAttribute("opacity", parent ? "0.6" : "1");
      f.g.classList.toggle("fg-parent", !!parent);
    }

    function zoom(i) {
      var f = frames[i], scale = usable / f.width, j, need;
      frames.forEach(function (o) { show(o, false); });
      for (j = i; j < frames.length && (j === i || frames[j].depth > f.depth); j++) {
        place(frames[j], left + (frames[j].x - f.x) * scale, frames[j].width * scale);
        show(frames[j], true);
      }
      for (j = i - 1, need = f.depth - 1; j >= 0 && need >= 0; j--) {
        if (frames[j].depth === need) {
          place(frames[j], left, usable);
          show(frames[j], true, true);
          need--;
        }
      }
      svg.setAttribute("data-zoomed", String(i));
      reset.setAttribute("visibility", "visible");
    }

    function unzoom() {
      frames.forEach(function (f) {
        place(f, f.x, f.width);
        show(f, true);
      });
      svg.removeAttribute("data-zoomed");
      reset.setAttribute("visibility", "hidden");
    }

    function search(query) {
      var match = query ? matcher(query) : null;
      var sum = 0, inside = -1;  // the depth of the matching frame whose subtree this is (counted once)
      frames.forEach(function (f) {
        if (inside >= 0 && f.depth <= inside) inside = -1;
        var hit = !!(match && match(f.name));
        f.g.classList.toggle("fg-match", hit);
        f.rect.setAttribute("fill", hit ? MATCH_FILL : f.fill);
        if (hit && inside < 0) {
          sum += f.weight;
          inside = f.depth;
        }
      });
      if (!query) {
        matched.textContent = "";
        svg.removeAttribute("data-search");
      } else if (!match) {
        matched.textContent = "not a regular expression: " + query;
      } else {
        matched.textContent = "Matched: " + (total ? (100 * sum / total).toFixed(2) : "0.00") + "% (" + sum +
          " of " + total + " " + unit + ")";
        svg.setAttribute("data-search", query);
      }
    }

    svg.addEventListener("click", function (e) {
      var g = e.target.closest("g.frame");
      if (g) {
        zoom(frames.findIndex(function (f) { return f.g === g; }));
      } else if (e.target.closest(".fg-reset")) {
        unzoom();
      } else if (e.target.closest(".fg-search")) {
        var q = window.prompt("Search frames: a substring, or /regular expression/", svg.getAttribute("data-search") || "");
        if (q !== null) search(q);
      }
    });
    searchButton.setAttribute("visibility", "visible");
  }

  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("svg.flamegraph"), setup);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
