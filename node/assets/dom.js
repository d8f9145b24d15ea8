/*
 * DOM helpers shared by the buyer's page (app.js) and the operator's page (ops.js). Served,
 * like them, under a content-hashed name; they import it by the placeholder the server fills in.
 */

const SVG_NS = 'http://www.w3.org/2000/svg';

/** The element with this id. */
export const $ = (id) => document.getElementById(id);

/** An HTML element with attributes (`text` sets textContent) and children. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'text') element.textContent = value;
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  element.append(...children.filter((child) => child !== null && child !== undefined));
  return element;
}

/** An SVG element with attributes. */
export function s(tag, attributes = {}) {
  const element = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  return element;
}
