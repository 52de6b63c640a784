// The audit page in Debian's Chromium: a leave asked through the management API
// (`PUT /api/v1/clusters/{cluster}/members/{a}`, form `operation=Leave`, the admin token)
// appears on /ui/audit as an accepted `member.leave` of that member with the admin token's id;
// a down with a wrong token appears as refused (401); the node page links its entries; the
// audit page of a cluster whose targets and reasons are the XSS corpus runs nothing.
// Run by server/tests/browser.rs. Prints one JSON line of results; exits non-zero on failure.
//
// Environment: TROUPE_URL, TROUPE_ADMIN_TOKEN, TROUPE_ADMIN_ID (the token id the page must
// show), TROUPE_MEMBER (host:port of a member of cluster `prod`), TROUPE_XSS_CLUSTER,
// TROUPE_ARTIFACTS, CHROMIUM.
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.TROUPE_URL;
const admin = process.env.TROUPE_ADMIN_TOKEN;
const adminId = process.env.TROUPE_ADMIN_ID;
const member = process.env.TROUPE_MEMBER;
const xssCluster = process.env.TROUPE_XSS_CLUSTER;
const artifacts = process.env.TROUPE_ARTIFACTS;

const results = { latency_ms: {}, screenshots: [], checks: [], statuses: {} };
const problems = [];
const check = (ok, what) => { results.checks.push(what); if (!ok) { problems.push(what); } };

async function operate(method, path, bearer, body) {
  const r = await fetch(base + path, {
    method,
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: 'Bearer ' + bearer },
    body,
  });
  return r.status;
}

async function shot(page, name) {
  const path = join(artifacts, name + '.png');
  await page.screenshot({ path, fullPage: true });
  results.screenshots.push(path);
}

await mkdir(artifacts, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-background-networking', '--disable-dev-shm-usage'],
  headless: true,
});
const dialogs = [];
const pageErrors = [];
try {
  const page = await (await browser.newContext({ viewport: { width: 1360, height: 900 } })).newPage();
  page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  const q = '?cluster=prod';

  await page.goto(base + '/ui/audit' + q);
  check(await page.locator('table.audit tbody tr').count() === 0, 'the audit page starts empty');
  const nav = page.locator('header.top nav a.active');
  check((await nav.textContent()).trim() === 'Audit', 'the nav links the audit page and marks it');

  // The leave, through the management API, then the page as a person opens it.
  const started = Date.now();
  results.statuses.leave = await operate('PUT', `/api/v1/clusters/prod/members/${encodeURIComponent(member)}`,
                                         admin, 'operation=Leave');
  check(results.statuses.leave === 202, `the leave is accepted (${results.statuses.leave})`);
  results.statuses.wrong = await operate('PUT', `/management/prod/cluster/members/${encodeURIComponent(member)}`,
                                         'not-the-admin-token', 'operation=Down');
  check(results.statuses.wrong === 401, `a down with a wrong token is refused (${results.statuses.wrong})`);
  await page.goto(base + '/ui/audit' + q);
  const leave = page.locator('table.audit tbody tr', { hasText: 'member.leave' });
  await leave.first().waitFor({ state: 'visible', timeout: 5000 });
  results.latency_ms['leave on the audit page'] = Date.now() - started;
  const cells = (await leave.first().locator('td').allTextContents()).map((t) => t.trim());
  check(cells[2].startsWith(member), `the entry names the member (${cells[2]})`);
  check(cells[3] === adminId, `the entry names the admin token's id (${cells[3]})`);
  check(/^accepted\s+202$/.test(cells[4]), `the entry says accepted 202 (${cells[4]})`);
  check(/^\d+$/.test(cells[6]), `the entry names the queued operation (${cells[6]})`);
  check(!(await page.content()).includes(admin), 'the page never shows the admin token');
  const refused = page.locator('table.audit tbody tr', { hasText: 'member.down' });
  check(await refused.count() === 1, 'the refused down is listed');
  const refusedCells = (await refused.first().locator('td').allTextContents()).map((t) => t.trim());
  check(/^refused\s+401$/.test(refusedCells[4]) && refusedCells[3] === 'unknown' && /wrong bearer token/.test(refusedCells[5]),
        `the refused down says refused 401, token unknown, why (${refusedCells.join(' | ')})`);
  check(cells[0].endsWith('UTC'), `times say UTC (${cells[0]})`);
  await shot(page, 'audit');

  // The node page links its entries, and the link filters the audit page to the node.
  await page.goto(base + '/ui/node' + q + '&node=' + encodeURIComponent(member));
  const link = page.locator('a[data-audit-count]');
  check((await link.getAttribute('data-audit-count')) === '2', 'the node page counts its 2 entries');
  await link.click();
  await page.waitForURL((url) => url.pathname === '/ui/audit' && url.searchParams.get('target') === member);
  check(await page.locator('table.audit tbody tr').count() === 2, "the node page's link shows its 2 entries");

  // Hostile targets and reasons: rendered as text, nothing runs.
  await page.goto(base + '/ui/audit?cluster=' + encodeURIComponent(xssCluster));
  await page.waitForLoadState('load');
  await page.waitForTimeout(150);
  const rows = await page.locator('table.audit tbody tr').count();
  check(rows > 50, `the hostile cluster's audit page lists its entries (${rows})`);
  check(await page.evaluate(() => window.__xss) === undefined, 'no payload ran on the audit page');
  await shot(page, 'xss-audit');
  check(dialogs.length === 0, `no dialog opened (${dialogs.slice(0, 3).join(' | ')})`);
  check(pageErrors.length === 0, `no script error (${pageErrors.slice(0, 3).join(' | ')})`);
} catch (e) {
  problems.push('error: ' + (e && e.stack || e));
} finally {
  await browser.close();
}
results.problems = problems;
console.log(JSON.stringify(results));
process.exit(problems.length === 0 ? 0 : 1);
