/*
 * krig_diag.c: an ipmi_sim module that adds the one chassis control real
 * BMCs have and ipmi_sim 2.0.33 lacks: "pulse diagnostic interrupt"
 * (`ipmitool chassis power diag`). It sends an NMI to the VM through the
 * VM serial interface (QEMU's ipmi-bmc-extern) and logs a "Critical
 * Interrupt / Front Panel NMI" event in the SEL, as a server's BMC does.
 * Every other chassis control goes to ipmi_sim's own handler.
 *
 * Build: gcc -shared -fPIC -o krig_diag.so krig_diag.c   (libopenipmi-dev)
 * Use:   loadlib "/path/krig_diag.so"   in lan.conf
 */
#include <stdio.h>
#include <string.h>
#include <OpenIPMI/serv.h>
#include <OpenIPMI/mcserv.h>
#include <OpenIPMI/ipmi_msgbits.h>
#include <OpenIPMI/ipmi_err.h>

extern cmd_handler_f chassis_netfn_handlers[256];
int ipmi_mc_add_to_sel(lmc_data_t *mc, unsigned char record_type,
                       unsigned char event[13], unsigned int *recid);

static sys_data_t *krig_sys;
static cmd_handler_f orig_chassis_control;

static void
krig_chassis_control(lmc_data_t *mc, msg_t *msg, unsigned char *rdata,
                     unsigned int *rdata_len, void *cb_data)
{
    channel_t **chans, *bchan;
    unsigned char ev[13];
    unsigned int recid;

    if (msg->len < 1 || (msg->data[0] & 0xf) != 4) {
        orig_chassis_control(mc, msg, rdata, rdata_len, cb_data);
        return;
    }
    chans = krig_sys->mc_get_channelset(mc);
    bchan = chans ? chans[15] : NULL;
    if (!bchan || !bchan->hw_op || !HW_OP_CAN_NMI(bchan)) {
        rdata[0] = IPMI_INVALID_DATA_FIELD_CC;   /* no VM connected that takes NMIs */
        *rdata_len = 1;
        return;
    }
    bchan->hw_op(bchan, HW_OP_SEND_NMI);
    memset(ev, 0, sizeof(ev));
    ev[4] = 0x20;       /* generator: the BMC */
    ev[6] = 0x04;       /* event message revision */
    ev[7] = 0x13;       /* sensor type: critical interrupt */
    ev[8] = 0x00;       /* sensor number */
    ev[9] = 0x6f;       /* assertion, sensor-specific */
    ev[10] = 0x00;      /* offset 0: front panel NMI / diagnostic interrupt */
    ev[11] = 0xff;
    ev[12] = 0xff;
    ipmi_mc_add_to_sel(mc, 0x02, ev, &recid);
    rdata[0] = 0;
    *rdata_len = 1;
}

int
ipmi_sim_module_print_version(sys_data_t *sys, char *options)
{
    printf("krig_diag 1\n");
    return 0;
}

int
ipmi_sim_module_init(sys_data_t *sys, char *options)
{
    krig_sys = sys;
    orig_chassis_control = chassis_netfn_handlers[IPMI_CHASSIS_CONTROL_CMD];
    return ipmi_emu_register_cmd_handler(IPMI_CHASSIS_NETFN, IPMI_CHASSIS_CONTROL_CMD,
                                         krig_chassis_control, NULL);
}
