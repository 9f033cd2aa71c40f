// node report_script_test.js REPORT.html
//
// Runs the report page's script (replay/report_assets/report.js, as the page
// embeds it) on the page's own data in a small stand-in for the browser's
// DOM, and checks what it drew against that data: the two loss curves, the
// divergence marker when the data has a divergence, one map row per data row
// and as many differing cells as the data has, and the page marked rendered.
// tests/replay/report_script_test.cmake makes the page with `dgrr report`.
// Exits 1 with a message on the first failed check; 0 prints "ok".
'use strict';
const fs = require('fs');
const vm = require('vm');

function fail(message) {
  console.error('report_script_test: ' + message);
  process.exit(1);
}

const html = fs.readFileSync(process.argv[2], 'utf8');
const dataMatch = html.match(/<script type="application\/json" id="dgrr-report-data">([\s\S]*?)<\/script>/);
const scripts = [...html.matchAll(/<script>\n([\s\S]*?)<\/script>/g)];
if (!dataMatch) fail('no dgrr-report-data block in the page');
if (scripts.length !== 1) fail('expected one page script, found ' + scripts.length);
const data = JSON.parse(dataMatch[1]);

// The subset of the DOM the script uses.
class Element {
  constructor(tag) {
    this.tagName = tag;
    this.attributes = {};
    this.children = [];
    this.listeners = {};
    this.style = {};
    this.textContent = '';
    this.className = '';
    this.disabled = false;
    this.value = '';
  }
  setAttribute(k, v) { this.attributes[k] = String(v); }
  getAttribute(k) { return this.attributes[k]; }
  appendChild(e) { this.children.push(e); return e; }
  addEventListener(type, f) { this.listeners[type] = f; }
  set innerHTML(v) { if (v !== '') fail('innerHTML set to markup'); this.children = []; }
  *walk() { for (const c of this.children) { yield c; yield* c.walk(); } }
  classes() { return (this.attributes['class'] || this.className).split(/\s+/); }
}
const ids = ['dgrr-report-data', 'loss-chart', 'loss-legend', 'loss-difference', 'loss-notes',
             'map-order', 'map-summary', 'boundary-map'];
const byId = {};
for (const id of ids) byId[id] = new Element('div');
byId['dgrr-report-data'].textContent = dataMatch[1];
byId['map-order'].value = 'layer';
const body = new Element('body');
function all() {
  const out = [];
  for (const id of ids) for (const e of byId[id].walk()) out.push(e);
  return out;
}
const document = {
  body,
  getElementById: (id) => byId[id] || all().find((e) => e.attributes.id === id) || null,
  createElementNS: (ns, tag) => new Element(tag),
  createElement: (tag) => new Element(tag),
  createTextNode: (text) => Object.assign(new Element('#text'), {textContent: text}),
  querySelectorAll: (selector) => {
    if (selector !== '#map-cells rect.differs') fail('unexpected selector ' + selector);
    const cells = document.getElementById('map-cells');
    return cells ? [...cells.walk()].filter((e) => e.tagName === 'rect' && e.classes().includes('differs')) : [];
  },
};

try {
  vm.runInNewContext(scripts[0][1], {document, Math, JSON, Object, String}, {filename: 'report.js'});
} catch (e) {
  fail('the script threw: ' + (e && e.stack || e));
}

if (body.getAttribute('data-rendered') !== 'yes') fail('the page was not marked rendered');
const find = (id) => document.getElementById(id);
const withLoss = (side) => data.loss[side].filter((p) => p[1] !== null).length;
for (const [side, cls] of [['a', 'loss-a'], ['b', 'loss-b']]) {
  const svg = find('loss-svg');
  const path = svg && [...svg.walk()].find((e) => e.tagName === 'path' && e.classes().includes(cls));
  if (withLoss(side) > 0 && !path) fail('no ' + cls + ' curve although the data has losses');
  if (path && path.attributes.d.split(/[ML]/).length - 1 !== withLoss(side)) {
    fail(cls + ' has ' + (path.attributes.d.split(/[ML]/).length - 1) + ' points, the data ' + withLoss(side));
  }
}
if ((find('loss-divergence') !== null) !== (data.divergence !== null)) {
  fail('loss divergence marker ' + (data.divergence ? 'missing' : 'drawn without a divergence'));
}
const map = find('map-svg');
if (!map) fail('no boundary map');
const labels = [...map.walk()].filter((e) => e.classes().includes('row-label'));
if (labels.length !== data.map.rows.length) {
  fail(labels.length + ' map row labels for ' + data.map.rows.length + ' rows');
}
let differing = 0;
for (const row of data.map.rows) differing += row.cells.filter((c) => c[2] > 0).length;
const differs = document.querySelectorAll('#map-cells rect.differs').length;
if (differs !== differing) fail(differs + ' differing map cells drawn, the data has ' + differing);
if ((find('map-divergence') !== null) !== (data.map.divergent_row !== undefined && data.divergence !== null)) {
  fail('map divergence outline does not match the data');
}
if (!find('map-summary').textContent.startsWith(data.map.rows.length + ' rows x ' + data.map.columns.length)) {
  fail('map summary "' + find('map-summary').textContent + '"');
}
console.log('ok: ' + (data.divergence ? 'divergence at step ' + data.divergence.step : 'no divergence') + ', ' +
            data.map.rows.length + ' rows, ' + differing + ' differing cells');
