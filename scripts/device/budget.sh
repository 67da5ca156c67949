# GPU budget runs (issue 15): a full-size SD1.5 random checkpoint at 512x512 with no budget,
# 2 GiB and 1900 MiB --novram; run after scripts/device.sh check (uses build-dev).
B=./build-dev/headroom
python3 -c "
import json;j=json.load(open('examples/default_workflow.json'));j['5']['inputs'].update(width=512,height=512);j['3']['inputs']['steps']=8;j['4']['inputs']['ckpt_name']='sd15-full.safetensors';json.dump(j,open('/tmp/hr/sd15.json','w'))"
$B make-model --arch sd1 --size full --seed 0 -o /tmp/hr/models/checkpoints/sd15-full.safetensors > /dev/null 2>&1 || echo "make-model full failed"
echo "== SD1.5 full 512x512, 8 steps, no budget"
$B run /tmp/hr/sd15.json --device cuda --models-dir /tmp/hr/models --output-dir /tmp/hr/out 2>&1 | grep -v "^\[" | tail -5
echo "== same, --vram-budget 2GiB"
$B run /tmp/hr/sd15.json --device cuda --models-dir /tmp/hr/models --output-dir /tmp/hr/out --vram-budget 2GiB 2>&1 | tr '\r' '\n' | grep -E "headroom|node|png" | tail -8
echo "== same, --vram-budget 1900MiB --novram"
$B run /tmp/hr/sd15.json --device cuda --models-dir /tmp/hr/models --output-dir /tmp/hr/out --vram-budget 1900MiB --novram 2>&1 | tr '\r' '\n' | grep -E "headroom|png" | tail -6
