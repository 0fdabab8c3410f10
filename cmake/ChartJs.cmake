# Chart.js, inlined into every HTML report (no CDN: a report opens offline). It comes from Debian's
# libjs-chart.js (3.9.1, MIT licence); -DBATCHWISE_CHARTJS=/path/to/chart.min.js picks another
# UMD build. Without it the library still builds, and asking for an HTML report says what to install.
find_file(BATCHWISE_CHARTJS chart.min.js PATHS /usr/share/javascript/chart.js NO_DEFAULT_PATH
          DOC "Chart.js UMD build inlined into HTML reports (Debian: libjs-chart.js)")
set(_bw_chartjs_cpp ${PROJECT_BINARY_DIR}/generated/chartjs.cpp)
if(BATCHWISE_CHARTJS)
  file(READ ${BATCHWISE_CHARTJS} _bw_chartjs)
  string(REGEX MATCH "Chart\\.js v([0-9]+\\.[0-9]+\\.[0-9]+)" _bw_chartjs_banner "${_bw_chartjs}")
  set(_bw_chartjs_version "${CMAKE_MATCH_1}")
  string(FIND "${_bw_chartjs}" ")chartjs\"" _bw_delimiter_at)
  string(FIND "${_bw_chartjs}" "</script" _bw_end_tag_at)
  if(NOT _bw_chartjs_version OR NOT _bw_delimiter_at EQUAL -1 OR NOT _bw_end_tag_at EQUAL -1)
    message(FATAL_ERROR "${BATCHWISE_CHARTJS}: not a Chart.js UMD build batchwise can inline "
                        "(no 'Chart.js vX.Y.Z' banner, or it contains </script); point BATCHWISE_CHARTJS at chart.min.js")
  endif()
  message(STATUS "HTML reports inline Chart.js ${_bw_chartjs_version} from ${BATCHWISE_CHARTJS}")
  set(_bw_chartjs_text "namespace batchwise::detail {\nextern const char kChartJsVersion[] = \"${_bw_chartjs_version}\";\n\
extern const char kChartJs[] = R\"chartjs(${_bw_chartjs})chartjs\";\n}  // namespace batchwise::detail\n")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${BATCHWISE_CHARTJS})
else()
  message(WARNING "Chart.js not found (Debian: apt-get install libjs-chart.js): `--html` and `batchwise report` "
                  "will say so instead of writing a report")
  set(_bw_chartjs_text "namespace batchwise::detail {\nextern const char kChartJsVersion[] = \"\";\n\
extern const char kChartJs[] = \"\";\n}  // namespace batchwise::detail\n")
endif()
# Rewritten only when it changes, so a re-configure does not recompile it.
file(WRITE ${_bw_chartjs_cpp}.new "${_bw_chartjs_text}")
configure_file(${_bw_chartjs_cpp}.new ${_bw_chartjs_cpp} COPYONLY)
set(BATCHWISE_CHARTJS_SOURCE ${_bw_chartjs_cpp})
