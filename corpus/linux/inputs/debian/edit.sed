# sed -E -f edit.sed text.txt: substitutions with back-references, an
# address range, the hold space, y///, line numbers and N.
/^$/d
s/\b(river|harbour|station)\b/[\1]/g
s/([A-Za-z]+) (stone|engine|signal)/\2 \1/
/[0-9]{3,}/{
  h
  s/.*([0-9]{3,}).*/number \1 on line:/
  =
  p
  g
}
20,40y/aeiou/AEIOU/
/^Table/,/^[A-Z]/s/^/> /
$!N
s/\n/ | /
