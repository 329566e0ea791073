# ruff: noqa: E501  (a text bank: one natural sentence per line reads better than wrapped strings)
"""Portuguese (pt) text bank of the sample corpus (European spelling; sites in .pt and .com.br)."""

TOPICS = {
    "travel": [
        "O comboio noturno de Zurique para Viena parte pouco depois das nove e chega a tempo do pequeno-almoço.",
        "Muitos viajantes subestimam o frio que pode fazer numa passagem de montanha, mesmo em pleno verão.",
        "O centro histórico é tão pequeno que se pode percorrer a pé numa única tarde.",
        "Reservámos uma pensão simples perto do porto e acordámos com o barulho dos barcos de pesca.",
        "Um passe regional de comboio costuma ficar mais barato do que comprar um bilhete para cada viagem.",
        "A travessia de ferry dura cerca de duas horas e, nos dias limpos, veem-se as ilhas a partir do convés.",
        "Aos domingos os autocarros locais passam com menos frequência, por isso convém consultar o horário com antecedência.",
        "O trilho sobe de forma constante por florestas de lariços antes de se abrir para um vasto prado alpino.",
        "Viajar fora da época alta significa encontrar menos gente e preços mais baixos no alojamento.",
        "O pequeno museu ao lado da estação conta a história do vale e dos seus habitantes.",
        "Depois de um longo dia de visitas, sentámo-nos na esplanada a ver o sol pôr-se sobre o lago.",
        "É boa ideia levar algum dinheiro vivo, porque nem todos os abrigos de montanha aceitam cartões.",
    ],
    "cooking": [
        "Amassar a massa durante pelo menos dez minutos, até ficar lisa e elástica.",
        "Uma pitada de sal realça a doçura dos tomates maduros.",
        "A sopa fica ainda melhor no dia seguinte, quando os sabores já tiveram tempo de se misturar.",
        "Torrar as nozes rapidamente numa frigideira sem gordura até começarem a libertar o aroma.",
        "Para um molho mais leve, substitui-se metade das natas por caldo de legumes.",
        "Deixar a carne repousar alguns minutos antes de a cortar, para que os sucos fiquem no interior.",
        "As ervas frescas juntam-se só no fim, caso contrário perdem o aroma.",
        "A minha avó fazia pão todos os sábados de manhã, e a casa inteira tinha um cheiro maravilhoso.",
        "Batatas, cebolas e um pouco de queijo chegam para uma refeição quente no inverno.",
        "O bolo está pronto quando um palito de madeira espetado no centro sai limpo.",
        "Os legumes da época comprados no mercado são geralmente mais frescos e mais baratos do que os do supermercado.",
        "Cozer a massa em bastante água com sal e escorrê-la quando ainda está al dente.",
    ],
    "science": [
        "A água expande-se quando congela, e é por isso que o gelo flutua à superfície dos lagos.",
        "As plantas usam a luz do sol para transformar o dióxido de carbono e a água em açúcar e oxigénio.",
        "Os investigadores mediram a temperatura do glaciar a várias profundidades durante três anos.",
        "A luz do sol demora pouco mais de oito minutos a chegar à Terra.",
        "As vacinas ensinam o sistema imunitário a reconhecer um agente patogénico antes de uma infeção real.",
        "A experiência foi repetida várias vezes para garantir que os resultados eram fiáveis.",
        "As abelhas indicam umas às outras onde encontrar flores através de uma dança especial.",
        "O som propaga-se muito mais depressa na água do que no ar.",
        "O cérebro humano contém milhares de milhões de células nervosas ligadas em redes complexas.",
        "Os sismos acontecem quando as placas tectónicas deslizam de repente ao longo de uma falha.",
        "Uma boa teoria científica faz previsões que podem ser verificadas através da observação.",
        "O novo telescópio permite aos astrónomos observar galáxias que se formaram pouco depois do big bang.",
    ],
    "local_news": [
        "Na terça-feira à noite, a assembleia municipal aprovou o orçamento para a renovação da escola primária.",
        "As obras na estrada principal vão continuar até ao fim de outubro.",
        "Mais de duzentos voluntários ajudaram no último fim de semana a limpar as margens do rio.",
        "A partir do próximo mês, o mercado semanal passa para a praça em frente à igreja.",
        "A biblioteca municipal alargou o horário e agora também abre ao sábado à tarde.",
        "Os moradores foram convidados para uma reunião pública sobre o projeto de uma nova ciclovia.",
        "Os bombeiros tiveram de sair duas vezes durante a tempestade para retirar árvores caídas.",
        "A aldeia celebrou a reabertura da sua ponte restaurada com música e uma pequena festa.",
        "Uma nova linha de autocarro vai ligar os bairros periféricos à estação de comboios.",
        "O presidente da câmara agradeceu a todas as associações o seu empenho na comunidade.",
        "A piscina municipal vai ficar fechada este verão devido a reparações urgentes.",
        "Vários pais recolheram assinaturas para uma passadeira mais segura em frente ao jardim de infância.",
    ],
    "technology": [
        "As atualizações regulares do software fecham falhas de segurança que os atacantes poderiam explorar.",
        "Uma boa palavra-passe deve ser longa e nunca deve ser usada em mais do que uma conta.",
        "Muitas pequenas empresas guardam hoje os seus dados na nuvem em vez de em servidores próprios.",
        "O novo telemóvel tem uma bateria maior, mas é bastante mais pesado do que o modelo anterior.",
        "O software livre pode ser analisado, alterado e partilhado por qualquer pessoa.",
        "Antes de comprar um portátil novo, vale a pena pensar para que é que ele vai realmente servir.",
        "Uma cópia de segurança só é útil se verificarmos regularmente que pode mesmo ser restaurada.",
        "Os carros elétricos estão a tornar-se mais populares à medida que a rede de postos de carregamento cresce.",
        "A escola introduziu tablets nas salas de aula e deu formação aos professores para os usarem.",
        "Os modelos de linguagem são treinados com grandes coleções de textos e aprendem a prever a palavra seguinte.",
        "Uma ligação à internet lenta deve-se muitas vezes a um router antigo e não ao fornecedor.",
        "A cidade está a testar sensores que mostram aos condutores onde há lugares de estacionamento livres.",
    ],
    "history": [
        "O castelo foi construído no século treze para controlar a rota comercial que atravessava a serra.",
        "Durante séculos, o mosteiro foi o mais importante centro de saber da região.",
        "O caminho de ferro chegou ao vale em 1889 e mudou para sempre a vida dos seus habitantes.",
        "No século dezanove muitas famílias emigraram para o Brasil por causa da pobreza e da fome.",
        "Os antigos paços do concelho sobreviveram a um grande incêndio que destruiu a maior parte das casas em redor.",
        "Durante a construção do novo parque de estacionamento, os arqueólogos encontraram moedas e cerâmica romanas.",
        "A primeira referência escrita à aldeia aparece num documento do ano de 1150.",
        "Durante a guerra, a ponte teve uma grande importância estratégica para os dois lados.",
        "A imprensa tornou os livros mais baratos e ajudou as novas ideias a espalharem-se pela Europa.",
        "As mulheres do país só conquistaram o direito de voto depois de uma longa luta política.",
        "O museu expõe ferramentas e roupas que mostram como viviam os camponeses há duzentos anos.",
        "O canal foi escavado à mão e as obras duraram quase vinte anos.",
    ],
    "sport": [
        "A equipa da casa venceu o jogo por dois a um graças a um golo no último minuto.",
        "Milhares de corredores participaram na maratona da cidade apesar da chuva.",
        "O esqui de fundo é um dos desportos de resistência mais exigentes.",
        "O jovem tenista chegou pela primeira vez à final do torneio.",
        "A corrida de ciclismo passa por três serras e termina com uma subida muito íngreme.",
        "O exercício regular melhora não só a condição física, mas também o humor e o sono.",
        "O treinador elogiou os jogadores pela disciplina e pelo espírito de equipa.",
        "O novo pavilhão desportivo vai estar à disposição das escolas e dos clubes a partir do outono.",
        "A época de hóquei no gelo começa em setembro e termina na primavera com os playoffs.",
        "A natação é um desporto suave, adequado a pessoas de todas as idades.",
        "O clube de futebol local procura voluntários para treinar as suas equipas de formação.",
        "Depois de uma lesão grave, a atleta precisou de quase um ano para voltar à competição.",
    ],
    "nature": [
        "No outono, os lariços ficam amarelo-dourados antes de perderem as agulhas.",
        "O íbex quase tinha desaparecido dos Alpes, mas regressou graças aos programas de proteção.",
        "As zonas húmidas armazenam grandes quantidades de água e são o lar de muitas espécies raras.",
        "O glaciar perdeu mais de um terço do seu volume nos últimos cinquenta anos.",
        "As marmotas passam os longos meses de inverno a dormir em tocas debaixo da terra.",
        "No início do verão, as flores silvestres cobrem os prados e atraem inúmeros insetos.",
        "O rio recuperou um curso mais natural e os peixes voltaram.",
        "As aves de rapina aproveitam as correntes de ar quente para planar durante horas sem bater as asas.",
        "A floresta protege a aldeia situada mais abaixo das avalanches e da queda de pedras.",
        "Pede-se aos caminhantes que não saiam dos trilhos para não perturbarem os animais selvagens.",
        "Nos invernos muito frios o lago congela, mas o gelo raramente é firme o suficiente para se andar sobre ele.",
        "Os cogumelos têm um papel importante na floresta porque decompõem a madeira morta.",
    ],
}

TITLES = {
    "travel": [
        "Um fim de semana na montanha",
        "Dicas para viajar fora de época",
        "De comboio ao longo do lago",
    ],
    "cooking": [
        "As nossas receitas de inverno preferidas",
        "Fazer pão em casa",
        "Cozinha simples com legumes da época",
    ],
    "science": [
        "Como se medem os glaciares",
        "Porque é que o gelo flutua",
        "Novidades da astronomia",
    ],
    "local_news": [
        "Notícias da câmara municipal",
        "Obras na estrada principal",
        "Uma festa para a nova ponte",
    ],
    "technology": [
        "Dicas para palavras-passe seguras",
        "A nuvem compensa para pequenas empresas",
        "O novo telemóvel posto à prova",
    ],
    "history": ["A história do nosso vale", "Quando chegou o comboio", "Tesouros do museu local"],
    "sport": [
        "Crónica da maratona da cidade",
        "Vitória no último minuto para a equipa da casa",
        "Desportos de inverno para principiantes",
    ],
    "nature": [
        "O outono na floresta de lariços",
        "O regresso do íbex",
        "Proteger as nossas zonas húmidas",
    ],
}

SECTIONS = {
    "travel": "viagens",
    "cooking": "receitas",
    "science": "ciencia",
    "local_news": "noticias",
    "technology": "tecnologia",
    "history": "historia",
    "sport": "desporto",
    "nature": "natureza",
}

TOXIC = [
    "És um idiota patético e ninguém quer ler o teu lixo.",
    "Cala-te de uma vez, imbecil sem cérebro, e volta para debaixo da tua pedra.",
    "Só um completo imbecil conseguia escrever uma porcaria tão inútil.",
    "Desaparece, falhado miserável, aqui ninguém te suporta.",
    "Palhaço nojento, as tuas opiniões estúpidas dão-me náuseas.",
    "Não passas de um lixo inútil, vai-te embora e nunca mais voltes.",
    "Ninguém quer saber de ti nem da tua vida patética, seu parvo.",
    "Toda a gente sabe que és um mentiroso e um cobarde sem coluna vertebral.",
    "O teu cérebro deve ser do tamanho de uma ervilha, idiota ignorante.",
    "Para de publicar as tuas parvoíces, troll irritante e ridículo.",
    "És burro demais para perceber seja o que for, por isso fecha essa boca.",
    "Este autor é um vigarista sem vergonha e um incompetente total.",
]

BOILERPLATE = {
    "cookie": (
        "Este site utiliza cookies para melhorar a sua experiência. Ao continuar a navegar, "
        "aceita a utilização de cookies."
    ),
    "cookie_buttons": ["Aceitar todos", "Apenas cookies necessários", "Definições"],
    "nav": [
        "Início",
        "Notícias",
        "Quem somos",
        "Serviços",
        "Blogue",
        "Loja",
        "Contactos",
        "Ficha técnica",
        "Privacidade",
        "Entrar",
    ],
    "read_more": "Ler mais",
    "related": "Artigos relacionados",
    "share": "Partilhar este artigo",
    "newsletter": "Subscreva a nossa newsletter",
    "rights": "Todos os direitos reservados.",
    "back_to_top": "Voltar ao topo",
}

SPAM = [
    "barato",
    "compre já",
    "melhor preço",
    "desconto",
    "portes grátis",
    "loja online",
    "saldos",
    "encomende hoje",
    "sapatilhas",
    "relógios",
    "pechincha",
    "ofertas imperdíveis",
]

PII = {
    "email": "Para questões sobre este artigo, escreva-nos para {email}.",
    "phone": "Pode contactar o nosso escritório pelo {phone_national} ou, a partir do estrangeiro, pelo {phone_international}.",
    "ipv4": "Durante a avaria, o servidor {ipv4} esteve inacessível durante várias horas.",
    "ipv6": "O nosso site também está disponível em IPv6 no endereço {ipv6}.",
    "iban": "Os donativos para a associação podem ser transferidos para a conta {iban}.",
}

LOOKALIKES = {
    "version": "A versão {version} da aplicação de horários está disponível desde {date_iso}.",
    "build": "A {date_local}, os computadores da biblioteca foram atualizados para a compilação {build}.",
    "price": "O guia impresso custa {price} e pode ser encomendado com o ISBN {isbn}.",
    "address": "O posto de turismo está aberto das {time_open} às {time_close} e fica em {postcode} {city}.",
}

FOOTER = "Este artigo foi revisto pela nossa redação."

LOCALE = {
    "country": "PT",
    "mail_names": ["ana.silva", "joao.santos", "geral", "redacao", "ines.ferreira", "pedro.costa"],
    "cities": [
        ("1100-148", "Lisboa"),
        ("4000-322", "Porto"),
        ("4700-435", "Braga"),
        ("3000-214", "Coimbra"),
    ],
    "date_local": "{d:02d}/{m:02d}/{y}",
    "price": "{units},{cents:02d} €",
    "isbn_group": "972",
}
