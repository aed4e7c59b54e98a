// ui_glyphs: see lang.h. A test (test_ui_text_fit.cpp) fails when a Chinese label in
// visualizer/ui uses a character missing here: add it.
#include "lang.h"

namespace furnace::viz {

const char* ui_glyphs() {
  return
      "、。一上下不个中丹为主之乘也习了事于从代件优会住余作使例修值做停先全共关内再准几出分切列初到制刻剩副加化单占卡即参反变可"
      "各同后向和器四回围固图在块型备复失始字存学完定实容宽对射尚局层峰己已布帧并广序度延建开张录待循微态总恢成或所才打批找拷按"
      "据接控播操改放效数整文新方无时映是显暂更最有未本机权束条来板果查标样梯检模次止正步段每比求汇没活流测满激炉点炼然物状独率"
      "环现理生用画略百的目直看矩确示秒积程空立端第等答签算类紫累线练经结绿自范蓝藏行表要见视解计认训讲设读课调败走跑跟路跳轮载"
      "输过运还这进连送逐通速那部里重量钟链锁闭问闲间阵阶际随隐集需面页顺预题马骤高默（），：；？";
}

}  // namespace furnace::viz
