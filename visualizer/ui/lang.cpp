// ui_glyphs: see lang.h. A test (test_ui_text_fit.cpp) fails when a Chinese label in
// visualizer/ui uses a character missing here: add it.
#include "lang.h"

namespace furnace::viz {

const char* ui_glyphs() {
  return
      "、。一上下不与个中丹为主久么之乘也习了事于互仍从代以件份优会住余作使例修倒值做停像先入全共关其内再准几出击分切列初到制刻前剩"
      "副加动勾化单占卡印即历参反发取变叠可史号各同后向含和哪器四回围固图在均块型备复失好始字存学它完定实容宽对射小尚就局层峰己已布"
      "带帧平并广序应度延建开张录待得循微态怎总恢慢成或所才打批找把拷按损据掉接控掩播操改放效数整文新方无时映是显暂更最有未本机权束"
      "条来板果查标样桶梯检模次止正步段每比求汇没沿法活流测清满漏激炉点炼然片物状独率环现理生用画略百的目直相看睡矩码确示秒积程空立"
      "章端第等答签算类精紫累线练经结给继续绿缓编缩置自范蓝藏行表被装要见视解计认让训讲设读课调贝败走起跑跟路跳轮载输过运近还这进连"
      "送选逐逗通速那部都配释里重量钟链锁长闭问闲间阵阶际除随隐隔集需露面页顺预题马骤高默（），：；？";
}

}  // namespace furnace::viz
