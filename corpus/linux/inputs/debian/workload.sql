-- Workload for the sqlite3 shells of the Debian corpus (corpus/linux/debian.sh),
-- read from standard input.  Deterministic: no random(), no 'now', no file.
.headers on
.mode list
.separator |

CREATE TABLE dept(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  city TEXT NOT NULL
);
INSERT INTO dept(id, name, city) VALUES
  (1, 'Research', 'Lyon'), (2, 'Sales', 'Porto'), (3, 'Support', 'Turku'),
  (4, 'Finance', 'Graz'), (5, 'Legal', 'Lyon'), (6, 'Operations', 'Gdansk');

CREATE TABLE emp(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  dept INTEGER NOT NULL REFERENCES dept(id),
  salary INTEGER NOT NULL,
  hired TEXT NOT NULL,
  manager INTEGER REFERENCES emp(id)
);

-- A few hundred rows from a recursive CTE.
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 160)
INSERT INTO emp(id, name, dept, salary, hired, manager)
SELECT i,
       'emp' || printf('%03d', i) || substr('abcdefghij', 1 + i % 10, 1 + i % 4),
       1 + (i * i + i / 7) % 6,
       30000 + (i * 7919) % 50000,
       date('2001-01-01', '+' || ((i * 37) % 8000) || ' days'),
       CASE WHEN i > 2 THEN i / 3 END
FROM n;

CREATE TABLE project(id INTEGER PRIMARY KEY, emp INTEGER, hours REAL, tag TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
INSERT INTO project(id, emp, hours, tag)
SELECT i, 1 + (i * 31) % 160, ((i * 17) % 400) / 4.0,
       CASE i % 4 WHEN 0 THEN 'alpha' WHEN 1 THEN 'beta' WHEN 2 THEN 'gamma' ELSE 'delta' END
FROM n;

CREATE INDEX emp_dept_salary ON emp(dept, salary);
CREATE INDEX project_emp ON project(emp);

SELECT count(*) AS employees, sum(salary) AS payroll, min(hired) AS first, max(hired) AS last
FROM emp;

-- Join, group by, having, order by.
SELECT d.name, d.city, count(e.id) AS n, avg(e.salary) AS avg_salary,
       max(e.salary) AS top
FROM dept d JOIN emp e ON e.dept = d.id
GROUP BY d.id
HAVING count(e.id) > 10
ORDER BY avg_salary DESC;

-- Three-way join with an aggregate over the projects.
SELECT d.name AS dept, p.tag, count(*) AS rows, round(sum(p.hours), 2) AS hours
FROM project p JOIN emp e ON e.id = p.emp JOIN dept d ON d.id = e.dept
GROUP BY d.name, p.tag
ORDER BY d.name, hours DESC;

-- Uses the index: a range on (dept, salary).
SELECT id, name, salary FROM emp
WHERE dept = 3 AND salary BETWEEN 40000 AND 52000
ORDER BY salary, id;

-- Self join: each manager's reports.
SELECT m.name AS manager, count(*) AS reports, group_concat(e.id, ',') AS ids
FROM emp e JOIN emp m ON m.id = e.manager
GROUP BY m.id HAVING count(*) = 3 ORDER BY m.id LIMIT 10;

-- A derived table, and correlated subqueries that use the index.
SELECT e.name, e.salary, round(a.avg_salary, 1) AS dept_avg FROM emp e
JOIN (SELECT dept, avg(salary) AS avg_salary FROM emp GROUP BY dept) a ON a.dept = e.dept
WHERE e.salary > a.avg_salary + 20000
ORDER BY e.salary DESC, e.name LIMIT 12;
SELECT d.name,
       (SELECT max(salary) FROM emp WHERE dept = d.id) AS top,
       (SELECT count(*) FROM emp WHERE dept = d.id AND salary < 40000) AS low
FROM dept d ORDER BY d.id;

-- Window functions.
SELECT dept, name, salary, rk FROM (
  SELECT dept, name, salary,
         rank() OVER (PARTITION BY dept ORDER BY salary DESC) AS rk
  FROM emp)
WHERE rk <= 3 ORDER BY dept, rk, name;

SELECT strftime('%Y', hired) AS year, count(*) AS hires,
       sum(count(*)) OVER (ORDER BY strftime('%Y', hired)) AS running
FROM emp GROUP BY year ORDER BY year;

-- Updates and deletes in a transaction, then a check.
BEGIN;
UPDATE emp SET salary = salary + 1000 WHERE dept IN (SELECT id FROM dept WHERE city = 'Lyon');
DELETE FROM project WHERE hours < 5;
UPDATE project SET tag = upper(tag) WHERE emp % 9 = 0;
COMMIT;
SELECT count(*) AS projects, count(DISTINCT tag) AS tags, sum(hours) AS hours FROM project;
SELECT tag, count(*) FROM project GROUP BY tag ORDER BY tag;

-- Strings, LIKE, CASE, coalesce, printf.
SELECT printf('%-10s|%6.1f|%5d', name, salary / 1000.0, length(name)) AS line
FROM emp WHERE name LIKE 'emp1_5%' ORDER BY id;
SELECT CASE WHEN salary >= 70000 THEN 'high' WHEN salary >= 50000 THEN 'mid' ELSE 'low' END AS band,
       count(*), coalesce(min(manager), -1)
FROM emp GROUP BY band ORDER BY band;

-- A recursive CTE over the management chain.
WITH RECURSIVE chain(id, depth, path) AS (
  SELECT id, 0, name FROM emp WHERE id = 150
  UNION ALL
  SELECT e.manager, c.depth + 1, c.path || ' > ' || m.name
  FROM chain c JOIN emp e ON e.id = c.id JOIN emp m ON m.id = e.manager
  WHERE c.depth < 5
)
SELECT depth, path FROM chain ORDER BY depth;

.mode column
SELECT d.name, count(*) AS n, total(p.hours) AS h
FROM dept d LEFT JOIN emp e ON e.dept = d.id LEFT JOIN project p ON p.emp = e.id
GROUP BY d.name ORDER BY d.name;
PRAGMA integrity_check;
