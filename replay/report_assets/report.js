(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('dgrr-report-data').textContent);
  var NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    var t = svg('text', Object.assign({x: x, y: y}, attrs || {}), parent);
    t.textContent = s;
    return t;
  }
  function ticks(lo, hi, n) {
    if (hi <= lo) return [lo];
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    if (err >= 5) step *= 5; else if (err >= 2) step *= 2;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + 1e-12; v += step) out.push(+v.toPrecision(12));
    return out;
  }
  var divStep = data.divergence ? data.divergence.step : null;

  function drawLoss() {
    var host = document.getElementById('loss-chart');
    host.innerHTML = '';
    var A = data.loss.a.filter(function (p) { return p[1] !== null; });
    var B = data.loss.b.filter(function (p) { return p[1] !== null; });
    if (A.length + B.length === 0) {
      host.textContent = 'Neither run recorded a loss in its STEP records.';
      return;
    }
    var W = 1000, H = 300, m = {l: 64, r: 16, t: 14, b: 36};
    var all = A.concat(B);
    var x0 = Math.min.apply(null, all.map(function (p) { return p[0]; }));
    var x1 = Math.max.apply(null, all.map(function (p) { return p[0]; }));
    var y0 = Math.min.apply(null, all.map(function (p) { return p[1]; }));
    var y1 = Math.max.apply(null, all.map(function (p) { return p[1]; }));
    if (x1 === x0) { x0 -= 0.5; x1 += 0.5; }
    var pad = (y1 - y0) * 0.06 || Math.abs(y0) * 0.01 || 1;
    y0 -= pad; y1 += pad;
    var X = function (s) { return m.l + (s - x0) / (x1 - x0) * (W - m.l - m.r); };
    var Y = function (v) { return H - m.b - (v - y0) / (y1 - y0) * (H - m.t - m.b); };
    var root = svg('svg', {id: 'loss-svg', 'class': 'chart', viewBox: '0 0 ' + W + ' ' + H, width: '100%'}, host);
    if (data.certified.last_step !== null) {
      var cx = X(Math.min(data.certified.last_step + 0.5, x1));
      svg('rect', {id: 'loss-certified', x: m.l, y: m.t, width: Math.max(0, cx - m.l), height: H - m.t - m.b,
                   fill: '#e6f4e6'}, root);
      text(root, m.l + 4, m.t + 12, 'certified', {fill: '#3a7a3a'});
    }
    var axis = svg('g', {'class': 'axis'}, root);
    svg('line', {x1: m.l, y1: H - m.b, x2: W - m.r, y2: H - m.b}, axis);
    svg('line', {x1: m.l, y1: m.t, x2: m.l, y2: H - m.b}, axis);
    ticks(x0, x1, 10).forEach(function (s) {
      if (s !== Math.floor(s)) return;
      svg('line', {x1: X(s), y1: H - m.b, x2: X(s), y2: H - m.b + 4}, axis);
      text(root, X(s), H - m.b + 16, String(s), {'text-anchor': 'middle'});
    });
    ticks(y0, y1, 6).forEach(function (v) {
      svg('line', {x1: m.l - 4, y1: Y(v), x2: m.l, y2: Y(v)}, axis);
      text(root, m.l - 6, Y(v) + 4, String(v), {'text-anchor': 'end'});
    });
    text(root, (m.l + W - m.r) / 2, H - 4, 'step', {'text-anchor': 'middle'});
    text(root, 14, (m.t + H - m.b) / 2, 'loss', {transform: 'rotate(-90 14 ' + (m.t + H - m.b) / 2 + ')',
                                                 'text-anchor': 'middle'});
    function line(points, cls, color, dash) {
      if (points.length === 0) return;
      var d = points.map(function (p, i) { return (i ? 'L' : 'M') + X(p[0]).toFixed(2) + ' ' + Y(p[1]).toFixed(2); });
      svg('path', {'class': cls, d: d.join(''), fill: 'none', stroke: color, 'stroke-width': 1.6,
                   'stroke-dasharray': dash || ''}, root);
    }
    line(A, 'loss-a', '#1f5fbf');
    line(B, 'loss-b', '#e0701a', '5 3');
    if (divStep !== null) {
      svg('line', {id: 'loss-divergence', x1: X(divStep), y1: m.t, x2: X(divStep), y2: H - m.b,
                   stroke: '#c00', 'stroke-width': 1.5}, root);
      text(root, Math.min(X(divStep) + 4, W - 190), m.t + 26, 'first divergent step ' + divStep,
           {id: 'loss-divergence-label', fill: '#c00'});
    }
    drawLossDifference(A, B);
    var legend = document.getElementById('loss-legend');
    legend.innerHTML = '';
    [['A', '#1f5fbf'], ['B (dashed)', '#e0701a']].forEach(function (l) {
      var s = document.createElement('span');
      s.className = 'swatch'; s.style.background = l[1];
      legend.appendChild(s); legend.appendChild(document.createTextNode(l[0]));
    });
    var notes = [];
    var fl = data.loss.first_loss_difference_step, fp = data.loss.first_params_difference_step;
    notes.push(fl === null ? 'the recorded losses agree bit for bit at every common step'
                           : 'first step whose recorded loss differs: ' + fl);
    notes.push(fp === null ? 'the parameter fingerprints agree at every common step'
                           : 'first step whose parameter fingerprint differs: ' + fp);
    document.getElementById('loss-notes').textContent = notes.join('; ') + '.';
  }

  // |A - B| at the steps both curves show, on a log scale: bitwise
  // differences far below the curves' resolution still show here.
  function drawLossDifference(A, B) {
    var host = document.getElementById('loss-difference');
    host.innerHTML = '';
    var byStep = {};
    B.forEach(function (p) { byStep[p[0]] = p[1]; });
    var diff = [];
    A.forEach(function (p) { if (p[0] in byStep) diff.push([p[0], Math.abs(p[1] - byStep[p[0]])]); });
    var nonzero = diff.filter(function (p) { return p[1] > 0; });
    if (nonzero.length === 0) {
      host.textContent = diff.length ? 'The two loss curves are equal at every step shown.' : '';
      return;
    }
    var W = 1000, H = 150, m = {l: 64, r: 16, t: 10, b: 30};
    var x0 = diff[0][0], x1 = diff[diff.length - 1][0];
    if (x1 === x0) { x0 -= 0.5; x1 += 0.5; }
    var lo = Math.floor(Math.log10(Math.min.apply(null, nonzero.map(function (p) { return p[1]; }))));
    var hi = Math.ceil(Math.log10(Math.max.apply(null, nonzero.map(function (p) { return p[1]; }))));
    if (hi === lo) hi = lo + 1;
    var X = function (s) { return m.l + (s - x0) / (x1 - x0) * (W - m.l - m.r); };
    var Y = function (v) { return H - m.b - (Math.log10(v) - lo) / (hi - lo) * (H - m.t - m.b); };
    var root = svg('svg', {id: 'loss-difference-svg', 'class': 'chart', viewBox: '0 0 ' + W + ' ' + H, width: '100%'}, host);
    var axis = svg('g', {'class': 'axis'}, root);
    svg('line', {x1: m.l, y1: H - m.b, x2: W - m.r, y2: H - m.b}, axis);
    svg('line', {x1: m.l, y1: m.t, x2: m.l, y2: H - m.b}, axis);
    for (var e = lo; e <= hi; e += Math.max(1, Math.ceil((hi - lo) / 5))) {
      text(root, m.l - 6, Y(Math.pow(10, e)) + 4, '1e' + e, {'text-anchor': 'end'});
    }
    text(root, 14, (m.t + H - m.b) / 2, '|A - B|', {transform: 'rotate(-90 14 ' + (m.t + H - m.b) / 2 + ')',
                                                    'text-anchor': 'middle'});
    nonzero.forEach(function (p) {
      svg('circle', {'class': 'loss-diff', cx: X(p[0]), cy: Y(p[1]), r: 2.5, fill: '#a33'}, root);
    });
    if (divStep !== null) {
      svg('line', {x1: X(divStep), y1: m.t, x2: X(divStep), y2: H - m.b, stroke: '#c00', 'stroke-width': 1.5}, root);
    }
    text(root, (m.l + W - m.r) / 2, H - 6, 'step (steps where the losses are equal are not drawn)',
         {'text-anchor': 'middle'});
  }

  function cellColor(c) {  // c = [column, compared, differing, uncompared]
    if (c[2] > 0) {
      var f = c[2] / c[1];
      var g = Math.round(150 - 150 * f), b = Math.round(150 - 150 * f);
      return {cls: 'differs', fill: 'rgb(' + (235 - Math.round(40 * f)) + ',' + g + ',' + b + ')'};
    }
    if (c[3] > 0) return {cls: 'uncompared', fill: '#f0c040'};
    return {cls: 'equal', fill: '#cde6cd'};
  }

  function drawMap(order) {
    var map = data.map, host = document.getElementById('boundary-map');
    host.innerHTML = '';
    var rows = map.rows.map(function (r, i) { return {r: r, i: i}; });
    if (order === 'rank') {
      rows.sort(function (x, y) { return x.r.rank - y.r.rank || x.r.first - y.r.first; });
    }
    var C = map.columns.length, R = rows.length;
    if (R === 0 || C === 0) { host.textContent = 'No boundaries to map.'; return; }
    var cw = Math.max(3, Math.min(48, Math.floor(820 / C)));
    var ch = R <= 60 ? 13 : R <= 500 ? 10 : 4;
    var labelW = ch >= 8 ? 300 : 110, barH = 44, top = barH + 22;
    var W = labelW + C * cw + 10, H = top + R * ch + 8;
    var root = svg('svg', {id: 'map-svg', 'class': 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H}, host);
    // Differing pairs per column, above the map.
    var most = Math.max(1, Math.max.apply(null, map.columns.map(function (c) { return c.differing; })));
    map.columns.forEach(function (c, k) {
      if (c.differing === 0) return;
      var h = Math.max(1, c.differing / most * barH);
      var bar = svg('rect', {'class': 'bar', x: labelW + k * cw, y: barH - h, width: Math.max(1, cw - 1), height: h,
                             fill: '#c33'}, root);
      svg('title', {}, bar).textContent = 'steps ' + c.first_step + (c.last_step !== c.first_step ? '-' + c.last_step : '') +
          ': ' + c.differing + ' differing pairs on ranks ' + c.ranks_differing.join(', ');
    });
    text(root, labelW - 6, barH - 2, 'differing pairs', {'text-anchor': 'end'});
    var every = Math.max(1, Math.ceil(40 / cw));
    map.columns.forEach(function (c, k) {
      if (k % every !== 0) return;
      text(root, labelW + k * cw + cw / 2, barH + 15, String(c.first_step), {'text-anchor': 'middle'});
    });
    var g = svg('g', {id: 'map-cells'}, root);
    rows.forEach(function (row, y) {
      var r = row.r, py = top + y * ch, divergentRow = row.i === map.divergent_row;
      if (ch >= 8) {
        var label = r.name + (r.last_name ? ' .. ' + r.last_name : '') + '  r' + r.rank +
                    (r.last_rank !== undefined ? '-' + r.last_rank : '');
        var t = text(root, labelW - 6, py + ch - 3, label.length > 48 ? label.slice(0, 47) + '\u2026' : label,
                     {'text-anchor': 'end', 'class': 'row-label' + (divergentRow ? ' divergent' : '')});
        if (divergentRow) t.setAttribute('fill', '#c00');
      }
      // Runs of equal cells are drawn as one rectangle; the others one each.
      var cells = r.cells, k = 0;
      while (k < cells.length) {
        var c = cells[k], col = cellColor(c), end = k + 1;
        if (col.cls === 'equal') {
          while (end < cells.length && cells[end][0] === cells[end - 1][0] + 1 &&
                 cellColor(cells[end]).cls === 'equal') end++;
        }
        var x = labelW + c[0] * cw, w = (cells[end - 1][0] - c[0] + 1) * cw;
        var rect = svg('rect', {'class': 'cell ' + col.cls, x: x, y: py, width: Math.max(1, w - (cw > 4 ? 1 : 0)),
                                height: Math.max(1, ch - (ch > 4 ? 1 : 0)), fill: col.fill}, g);
        if (col.cls !== 'equal') {
          var cm = map.columns[c[0]];
          svg('title', {}, rect).textContent = r.name + ' rank ' + r.rank + ', step ' + cm.first_step +
              (cm.last_step !== cm.first_step ? '-' + cm.last_step : '') + ': ' + c[2] + ' of ' + c[1] +
              ' pairs differ' + (c[3] ? ', ' + c[3] + ' boundaries never compared' : '');
        }
        k = end;
      }
      if (divergentRow && map.divergent_column !== undefined) {
        svg('rect', {id: 'map-divergence', x: labelW + map.divergent_column * cw - 1, y: py - 1,
                     width: cw + 1, height: ch + 1, fill: 'none', stroke: '#000', 'stroke-width': 2}, root);
      }
    });
    document.getElementById('map-summary').textContent =
        R + ' rows x ' + C + ' columns; ' + document.querySelectorAll('#map-cells rect.differs').length +
        ' cells with differing fingerprints.';
  }

  drawLoss();
  var select = document.getElementById('map-order');
  if (data.map.rows_per_group > 1) select.disabled = true;
  select.addEventListener('change', function () { drawMap(select.value); });
  drawMap(select.value);
  document.body.setAttribute('data-rendered', 'yes');
})();
