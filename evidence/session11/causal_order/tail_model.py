import heapq, math
def run(items, sms=132):
    q=[0.0]*sms; end=0
    for c in items:
        t=heapq.heappop(q); heapq.heappush(q,t+c); end=max(end,t+c)
    return end
def cost(r,bm,bn,ov): return ov+math.ceil((r+1)*bm/bn)
def order_fwd(heads,rb): return [(h,r) for h in range(heads) for r in range(rb)]
def order_groups(heads,rb,sizes):
    out=[];h0=0
    for g in sizes:
        for r in reversed(range(rb)):
            for h in range(h0,h0+g): out.append((h,r))
        h0+=g
    return out
def fixed(heads,g): 
    s=[];h=heads
    while h>0: s.append(min(g,h)); h-=g
    return s
def equal(heads,g):
    n=math.ceil(heads/g); base=heads//n; extra=heads%n
    return [base+1]*extra+[base]*(n-extra)
for heads,rb,maxg in [(32,32,6),(16,128,1),(8,16,12),(64,16,12),(32,32,3),(32,32,5),(16,32,6),(40,32,6),(96,8,24)]:
    for bn in (128,176):
        bm,ov=128,3
        c=lambda o:[cost(r,bm,bn,ov) for h,r in o]
        ideal=sum(c(order_fwd(heads,rb)))/132
        print(heads,rb,maxg,bn,'ideal %.0f fwd %.0f fixed %.0f equal %.0f'%(ideal,run(c(order_fwd(heads,rb))),run(c(order_groups(heads,rb,fixed(heads,maxg)))),run(c(order_groups(heads,rb,equal(heads,maxg))))), equal(heads,maxg))
print('budget sweep')
for heads,rb,kvmb in [(32,32,2),(16,128,8),(64,16,1),(16,32,2),(8,64,4),(32,64,4)]:
    for bn in (128,176):
        bm,ov=128,3
        c=lambda o:[cost(r,bm,bn,ov) for h,r in o]
        ideal=sum(c(order_fwd(heads,rb)))/132
        res=[]
        for budget in (8,12,16,24):
            g=max(1,min(heads,budget//kvmb))
            res.append((budget,g,round(run(c(order_groups(heads,rb,equal(heads,g)))))))
        print(heads,rb,bn,'ideal %.0f fwd %.0f'%(ideal,run(c(order_fwd(heads,rb)))),res)
