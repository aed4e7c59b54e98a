// ui_glyphs: see lang.h. A test (test_ui_text_fit.cpp) fails when a Chinese label in
// visualizer/ui uses a character missing here: add it.
#include "lang.h"

namespace furnace::viz {

const char* ui_glyphs() {
  return
      "、。一上下不与个中丹为主之乘也习了事于从代以件份优会住余作使例修倒值做停像先全共关其内再准几出击分切列初到制刻剩副加化单占卡"
      "印即参反发取变叠可各同后向和器四回围固图在均块型备复失始字存学它完定实容宽对射尚就局层峰己已布帧平并广序度延建开张录待循微态"
      "总恢成或所才打批找把拷按据接控播操改放效数整文新方无时映是显暂更最有未本机权束条来板果查标样桶梯检模次止正步段每比求汇没活流"
      "测满激炉点炼然物状独率环现理生用画略百的目直看矩确示秒积程空立端第等答签算类紫累线练经结绿自范蓝藏行表装要见视解计认训讲设读"
      "课调败走跑跟路跳轮载输过运还这进连送逐通速那部里重量钟链锁闭问闲间阵阶际除随隐集需露面页顺预题马骤高默（），：；？";
}

}  // namespace furnace::viz
