# cmake -DINPUT=file -DOUTPUT=header.h -DNAME=kSymbol -P EmbedText.cmake
# Writes a header defining `inline constexpr char NAME[]` holding the file's text.
file(READ ${INPUT} content)
set(delim "px_embed_")
file(WRITE ${OUTPUT} "// Generated from ${INPUT}; do not edit.\n#pragma once\n"
  "inline constexpr char ${NAME}[] = R\"${delim}(${content})${delim}\";\n")
